"""Small data files for `aiayn train`'s tasks, written by the tests: words that split into several sub-words,
multi-token answers followed by punctuation, endings that repeat a word of their context."""

import csv
import json
import random

TOPICS = {
    "sports": "ball goal team match score player win coach",
    "food": "bread soup cheese apple cook taste dinner salt",
    "music": "song guitar piano band sing rhythm melody drum",
}
FILLER = ["the", "a", "and", "of", "to", "in", "is", "it"]
PEOPLE = ["Annabella", "Benedikt", "Clarissa", "Dagobert", "Emmeline"]
PLACES = ["Paris", "Rome", "Oslo", "Lima", "Cairo", "Buenos Aires", "Kuala Lumpur"]


def topic_sentence(rng: random.Random, topic: str, words: int = 10) -> str:
    return " ".join(rng.choice(TOPICS[topic].split() + FILLER) for _ in range(words))


def write_classification_csv(path, rows_per_class=(150, 75, 75), seed: int = 0):
    """Rows ordered by label: the first 150 are sports."""
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for topic, rows in zip(TOPICS, rows_per_class, strict=True):
            writer.writerows([topic_sentence(rng, topic), topic] for _ in range(rows))


def write_entities(path, count: int, seed: int = 1):
    """Sentences tagged in IOB2, one JSON line each: people (`B-PER`) and places (`B-LOC I-LOC` for two words)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            person, place = rng.choice(PEOPLE), rng.choice(PLACES).split()
            tokens = [person, "went", "to", *place, rng.choice(FILLER)]
            tags = ["B-PER", "O", "O", "B-LOC", *["I-LOC"] * (len(place) - 1), "O"]
            f.write(json.dumps({"tokens": tokens, "ner_tags": tags}) + "\n")


def squad_rows(count: int, seed: int = 2) -> list[dict]:
    """SQuAD rows whose answer (a place of one or two words) is followed by a full stop."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        person, place = rng.choice(PEOPLE), rng.choice(PLACES)
        context = f"{' '.join(rng.choice(FILLER) for _ in range(6))} {person} lives in {place}."
        rows.append({"id": str(i), "title": "t", "context": context, "question": f"Where does {person} live?",
                     "answers": {"text": [place], "answer_start": [context.index(f"in {place}") + 3]}})  # fmt: skip
    return rows


def write_squad(path, count: int, seed: int = 2):
    """SQuAD's layout as transformers' run_qa reads it: {"data": [{id, title, context, question, answers}, ...]}."""
    path.write_text(json.dumps({"version": "1", "data": squad_rows(count, seed)}))


def write_swag(path, count: int, seed: int = 3):
    """SWAG's columns; the right ending is about the context's topic (a learnable case)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            topic = rng.choice(list(TOPICS))
            others = [t for t in TOPICS if t != topic]
            endings = [topic_sentence(rng, t, 4) for t in (topic, *others, rng.choice(others))]
            label = rng.randrange(4)
            endings[0], endings[label] = endings[label], endings[0]
            row = {"sent1": topic_sentence(rng, topic), "sent2": "then", "label": label}
            f.write(json.dumps({**row, **{f"ending{i}": e for i, e in enumerate(endings)}}) + "\n")


def write_summaries(path, count: int, seed: int = 4):
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["document", "summary"])
        for _ in range(count):
            topic = rng.choice(list(TOPICS))
            writer.writerow([topic_sentence(rng, topic), f"about {topic}"])
