"""Values of the tasks of `aiayn train` that the other value tests do not reach: refusals read in full (counts, ids,
every column named), question answering's windows and answers at their edges, text-to-text labels, lengths and
pair filters, span corruption's blocks and collator, and the predictions file's encoding, each on data where the
wrong choice gives another value."""

import os
import re
import subprocess
import sys

import datasets
import numpy as np
import pytest
import transformers
from helpers import tiny_config, word_tokenizer
from test_train_paths import qa_args, squad_v2

import aiayn
from aiayn.tokenization import train_tokenizer
from aiayn.train_arguments import DataArguments

QUESTION, CONTEXT = "Who met Ben ?", "Anna met Ben in Paris"


@pytest.fixture(scope="module")
def tokenizers():
    """Each family's tokenizer: the encoder's (CLS first, spaces not tokens), the decoder's (left padding,
    no CLS) and the seq2seq one's (no CLS, spaces are tokens), trained on the question and the context."""
    texts = [QUESTION, CONTEXT, "Where did Ben stay ?", "Anna met Ben in Paris . Ben stayed in Rome ."] * 20
    return {family: train_tokenizer(family, texts, 60) for family in ("encoder", "decoder", "seq2seq")}


def splits(**rows) -> datasets.DatasetDict:
    """A split of each list of rows, by name."""
    return datasets.DatasetDict({split: datasets.Dataset.from_list(examples) for split, examples in rows.items()})


# Classification and multiple choice.


def test_a_label_column_of_tag_lists_is_refused_as_classes_and_as_endings():
    """A token-classification file given to classification or multiple choice: its label column holds lists, a
    feature without a dtype, refused with the task's own sentence."""
    from aiayn.tasks.classification import check_classes
    from aiayn.tasks.multiple_choice import check_choices

    rows = {"text": ["Anna sang", "Ben ran"], "ending0": ["a", "b"], "ending1": ["c", "d"], "label": [["B", "O"]] * 2}
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_dict(rows))
    with pytest.raises(ValueError, match=re.escape("in the label column 'label'; it holds List(Value('string'))")):
        check_classes(corpus, DataArguments(text_column="text", label_column="label"))
    with pytest.raises(ValueError, match=re.escape("(an integer) in the label column 'label'; it holds List(Value(")):
        check_choices(corpus, DataArguments(context_column="text", question_column="text", label_column="label"))


def test_a_class_the_saved_classifier_lacks_is_named_with_its_split_and_the_models_classes(tokenizers):
    from aiayn.tasks.classification import classification_dataset

    config = tiny_config("encoder", id2label={0: "news", 1: "poem"}, label2id={"news": 0, "poem": 1})
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    known = datasets.Dataset.from_dict({"text": [CONTEXT], "label": ["poem"]})
    new = datasets.Dataset.from_dict({"text": [CONTEXT], "label": ["song"]})
    data_args = DataArguments(text_column="text", label_column="label", block_size=16)
    train = classification_dataset(datasets.DatasetDict(train=known), tokenizers["encoder"], model, data_args)
    assert list(train["train"]["labels"]) == [1]
    message = "The validation data's class 'song' is not a class of the model, ['news', 'poem']."
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        classification_dataset(datasets.DatasetDict(train=known, validation=new), tokenizers["encoder"], model,
                               data_args)  # fmt: skip


def test_two_endings_are_enough_and_the_refusals_name_every_ending():
    from aiayn.tasks.multiple_choice import check_choices

    swag_args = DataArguments(context_column="sent1", question_column="sent2", label_column="label")
    two = [{"sent1": "a", "sent2": "b", "ending0": "c", "ending1": "d", "label": 1}] * 2
    check_choices(splits(train=two), swag_args)
    three = [{**row, "ending2": "e"} for row in two]
    needs = "Multiple choice needs the columns ending0, ending1, ending2 in every split; the validation data"
    with pytest.raises(ValueError, match=f"^{re.escape(needs)}'s columns are "):
        check_choices(splits(train=three, validation=two), swag_args)
    empty = [three[0], {**three[0], "ending1": None, "ending2": None}]
    with pytest.raises(ValueError, match=f"^{re.escape(needs)} has no ending1, ending2 \\(or an empty one\\)"):
        check_choices(splits(train=three, validation=empty), swag_args)


# Question answering: the checks and the baseline.


def squad_rows(count: int, answers) -> datasets.DatasetDict:
    rows = [{"id": str(i), "question": QUESTION, "context": CONTEXT, "answers": answers} for i in range(count)]
    return splits(train=rows)


def test_squad_refusals_count_every_bad_question_and_show_the_first_five_ids():
    """Six questions with a fault each: the count is 6 and the ids shown are the first five, for answers that are
    plain strings (not SQuAD's dict), answers not where their start says, and questions without an answer."""
    from aiayn.tasks.question_answering import check_answers

    ids = "['0', '1', '2', '3', '4']"
    unequal = (
        f"6 question(s) of the train data do not have as many answer texts as answer starts in 'answers' "
        f"(ids {ids}): SQuAD's answers are " + '{"text": [...], "answer_start": [...]}, one start per text.'
    )
    with pytest.raises(ValueError, match=f"^{re.escape(unequal)}$"):
        check_answers(squad_rows(6, "Anna"), qa_args())
    misplaced = f"6 answer(s) of the train data are not in their context where their answer_start says (ids {ids})."
    with pytest.raises(ValueError, match=f"^{re.escape(misplaced)}$"):
        check_answers(squad_rows(6, {"text": ["Anna"], "answer_start": [3]}), qa_args())
    unanswered = f"6 question(s) of the train data have no answer (ids {ids}): that is SQuAD v2"
    with pytest.raises(ValueError, match=f"^{re.escape(unanswered)}"):
        check_answers(squad_rows(6, {"text": [], "answer_start": []}), qa_args())


def test_the_squad_v2_baseline_abstains_where_no_training_question_has_an_answer():
    """No training answer to take a median length from: the span rule answers one word, abstaining scores every
    training question, and the validation scores are abstention's (right on the one unanswerable question of two)."""
    from aiayn.tasks.question_answering import question_answering_baseline

    train = squad_v2([("Paris is big", None), ("Rome is old", None)])
    validation = squad_v2([("Cairo is hot", "Cairo"), ("Bonn is small", None)])
    scores = question_answering_baseline(None, datasets.DatasetDict(train=train, validation=validation),
                                         qa_args(version_2_with_negative=True))  # fmt: skip
    assert scores == {"eval_baseline_exact": 50.0, "eval_baseline_f1": 50.0}


# Question answering: windows.


def test_an_answer_that_is_the_contexts_first_token_starts_and_ends_on_it(tokenizers):
    from aiayn.tasks.question_answering import question_answering_features

    examples = {"id": ["q"], "question": [QUESTION], "context": [CONTEXT],
                "answers": [{"text": ["Anna"], "answer_start": [0]}]}  # fmt: skip
    features = question_answering_features(examples, tokenizers["encoder"], qa_args(block_size=32, doc_stride=4))
    first = features.sequence_ids(0).index(1)
    assert (features["start_positions"][0], features["end_positions"][0]) == (first, first)
    assert features["offset_mapping"][0][first] == (0, 4)


def test_a_left_padding_tokenizer_without_cls_windows_the_long_context_and_puts_null_answers_at_0(tokenizers):
    """The decoder's tokenizer (one token per character, context first): the context, longer than a window, is cut
    into overlapping windows that each keep the whole question; the four windows without "Rome" label position 0
    (there is no CLS token), the last one labels "Rome"."""
    from aiayn.tasks.question_answering import question_answering_features

    tokenizer, context, question = tokenizers["decoder"], "Anna met Ben in Paris . Ben stayed in Rome .", "Where?"
    examples = {"id": ["q"], "question": [question], "context": [context],
                "answers": [{"text": ["Rome"], "answer_start": [context.index("Rome")]}]}  # fmt: skip
    features = question_answering_features(examples, tokenizer, qa_args(block_size=24, doc_stride=4))
    question_ids = tokenizer(question, add_special_tokens=False)["input_ids"]
    assert all(ids[-len(question_ids) :] == question_ids for ids in features["input_ids"])
    positions = list(zip(features["start_positions"], features["end_positions"], strict=True))
    assert positions[:-1] == [(0, 0)] * (len(positions) - 1) and len(positions) > 2
    offsets, (start, end) = features["offset_mapping"][-1], positions[-1]
    assert context[offsets[start][0] : offsets[end][1]] == "Rome"


def test_a_questions_leading_spaces_are_neither_counted_against_the_stride_nor_tokenized(tokenizers):
    """With the seq2seq tokenizer, where spaces are tokens: the question "   Who met Ben ?" takes the room and the
    tokens of "Who met Ben ?", so the longest stride that room allows is accepted and the windows are the same."""
    from aiayn.tasks.question_answering import question_answering_dataset

    tokenizer = tokenizers["seq2seq"]
    longest = len(tokenizer(QUESTION, add_special_tokens=False)["input_ids"])
    assert len(tokenizer("   " + QUESTION, add_special_tokens=False)["input_ids"]) == longest + 2
    room = 24 - longest - tokenizer.num_special_tokens_to_add(pair=True)
    windows = {}
    for question in (QUESTION, "   " + QUESTION):
        corpus = splits(train=[{"id": "q", "question": question, "context": CONTEXT,
                                "answers": {"text": ["Ben"], "answer_start": [9]}}])  # fmt: skip
        data_args = qa_args(block_size=24, doc_stride=room - 1)
        windows[question] = list(question_answering_dataset(corpus, tokenizer, None, data_args)["train"]["input_ids"])
    assert windows["   " + QUESTION] == windows[QUESTION]


def test_windows_of_questions_without_answers_carry_no_answer_positions(tokenizers):
    from aiayn.tasks.question_answering import question_answering_features

    examples = {"id": ["q"], "question": [QUESTION], "context": [CONTEXT]}
    features = question_answering_features(examples, tokenizers["encoder"], qa_args(block_size=32, doc_stride=4))
    assert list(features.keys()) == ["input_ids", "attention_mask", "offset_mapping", "example_id"]


# Question answering: from logits to answers.


def one_window(offsets, context: str = "Anna met Ben"):
    features = datasets.Dataset.from_dict({"example_id": ["q"], "offset_mapping": [offsets]})
    return features, datasets.Dataset.from_list([{"id": "q", "context": context}])


def test_logits_past_a_windows_tokens_are_never_a_spans_start_or_end():
    """Unpadded windows of a batch: the Trainer pads the shorter window's logits with -100 past its tokens; the
    best start and end are its own tokens ("Anna met"), and a count of logits unlike the features' is named."""
    from aiayn.tasks.qa_postprocessing import postprocess_qa_predictions

    features, examples = one_window([None, [0, 4], [5, 8]])
    starts, ends = np.array([[0.0, 5.0, 1.0, -100.0, -100.0]]), np.array([[0.0, 1.0, 6.0, -100.0, -100.0]])
    assert postprocess_qa_predictions(examples, features, (starts, ends)) == {"q": "Anna met"}
    with pytest.raises(ValueError, match="^Got 2 predictions and 1 features.$"):
        postprocess_qa_predictions(examples, features, (np.vstack([starts, starts]), np.vstack([ends, ends])))


def test_outputs_after_the_logits_are_not_answers():
    """A seq2seq head's predictions hold the encoder's states after the start and end logits: the answers are those
    of the logits alone."""
    from aiayn.tasks.question_answering import answers_of

    features, examples = one_window([None, [0, 4], [5, 8], [9, 12]])
    starts, ends = np.array([[0.0, 1.0, 5.0, 0.0]]), np.array([[0.0, 0.0, 1.0, 4.0]])
    states = np.zeros((1, 4, 8))
    assert answers_of((starts, ends, states), features, examples, qa_args()) == {"q": "met Ben"}


# Text to text.


def test_padded_labels_are_minus_100_in_their_padding_only():
    from aiayn.tasks.generation import source_target_features

    data_args = DataArguments(max_source_length=4, max_target_length=4, pad_to_max_length=True)
    encoded = source_target_features(word_tokenizer(), ["w5 w6"], ["w7 w8 w9"], data_args, "train")
    assert encoded["input_ids"] == [[5, 6, 0, 0]] and encoded["labels"] == [[7, 8, 9, -100]]


def test_summarization_sets_the_length_that_translation_leaves_to_the_papers_source_bound(tmp_path):
    """A model whose generation config bounds the output by its source (the paper's `max_len_b`): summarization
    generates `--max_target_length` tokens at most, as run_summarization does; translation keeps the bound."""
    from aiayn.tasks.summarization import configure_summarization
    from aiayn.tasks.translation import configure_translation

    config = aiayn.preset_config("transformer-base", vocab_size=97, d_model=32, d_ff=64, num_heads=2, num_layers=1,
                                 num_decoder_layers=1)  # fmt: skip
    lengths = {}
    for configure in (configure_summarization, configure_translation):
        model = transformers.AutoModelForSeq2SeqLM.from_config(config)
        assert model.generation_config.max_len_b == 50
        training_args = transformers.Seq2SeqTrainingArguments(str(tmp_path), report_to="none")
        configure(model, training_args, DataArguments(max_target_length=7))
        lengths[configure.__name__] = (training_args.generation_max_length, model.generation_config.max_length)
    assert lengths == {"configure_summarization": (7, 7), "configure_translation": (None, None)}


def test_summarization_scores_nothing_where_the_evaluation_does_not_generate(tmp_path):
    from aiayn.tasks.summarization import summarization_metrics

    plain = transformers.Seq2SeqTrainingArguments(str(tmp_path), report_to="none")
    assert summarization_metrics(word_tokenizer(), plain, None, None, None, None, "validation") == {}


def test_a_translation_pair_is_kept_only_where_both_sides_fit_max_pair_tokens():
    from aiayn.tasks.translation import translation_dataset

    pairs = [("w5 w6", "w7 w8"), ("w5", "w6 w7 w8 w9"), ("w5 w6 w7 w8", "w9")]
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_list([
        {"translation": {"en": source, "de": target}} for source, target in pairs
    ]))  # fmt: skip
    kept = translation_dataset(corpus, word_tokenizer(), None, DataArguments(max_pair_tokens=3))["train"]
    assert (list(kept["input_ids"]), list(kept["labels"])) == ([[5, 6]], [[7, 8]])


def test_generated_predictions_are_written_in_utf_8_under_an_ascii_locale(tmp_path):
    """A process whose locale encoding is ASCII (the C locale, neither coerced nor in UTF-8 mode) writes
    generated_predictions.txt in UTF-8 all the same."""
    code = """
import codecs, locale, sys, types
import numpy as np
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from aiayn.tasks.generation import write_generated_predictions

words = Tokenizer(models.WordLevel({"<pad>": 0, "Gr\\u00fc\\u00dfe": 1, "aus": 2, "K\\u00f6ln": 3}, unk_token="<pad>"))
words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>")
trainer = types.SimpleNamespace(args=types.SimpleNamespace(predict_with_generate=True), processing_class=tokenizer)
output = types.SimpleNamespace(predictions=np.array([[1, 2, 3]]))
write_generated_predictions(output, trainer, None, None, None, sys.argv[1])
print(sys.flags.utf8_mode, codecs.lookup(locale.getpreferredencoding(False)).name)
"""
    environment = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                            env=environment, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["0", "ascii"]
    assert (tmp_path / "generated_predictions.txt").read_text(encoding="utf-8") == "Grüße aus Köln"


# Span corruption.


@pytest.fixture(scope="module")
def span_texts():
    texts = [f"the cat number {i} sat on the mat" for i in range(12)]
    return texts, train_tokenizer("seq2seq", texts * 5, 80, num_sentinels=4)


def test_span_corruption_blocks_are_the_texts_tokens_each_ended_by_one_eos(span_texts):
    """The tokenizer ends each text with EOS already: the blocks are the texts' tokens run together, cut into blocks
    of 17 raw tokens (what corrupts to 16), with no second EOS appended."""
    from aiayn.tasks.span_corruption import span_corruption_dataset

    texts, tokenizer = span_texts
    corpus = datasets.DatasetDict(train=datasets.Dataset.from_dict({"text": texts}))
    blocks = span_corruption_dataset(corpus, tokenizer, None, DataArguments(text_column="text", max_source_length=16))
    stream = [token for ids in tokenizer(texts)["input_ids"] for token in ids]
    assert list(blocks["train"]["input_ids"]) == [stream[i : i + 17] for i in range(0, len(stream) // 17 * 17, 17)]


def test_the_span_corruption_collator_follows_the_seed_and_builds_the_decoder_inputs(span_texts):
    from aiayn.tasks.span_corruption import span_corruption_collator

    texts, tokenizer = span_texts
    model = transformers.AutoModelForSeq2SeqLM.from_config(tiny_config("seq2seq", vocab_size=len(tokenizer)))
    stream = [token for ids in tokenizer(texts[:5])["input_ids"] for token in ids]
    examples = [{"input_ids": stream[i : i + 16]} for i in (0, 16, 32)]
    data_args = DataArguments(noise_density=0.25, mean_noise_span_length=2.0)  # 2 spans of 4 noise tokens in 16

    def batch(seed: int) -> dict:
        return span_corruption_collator(tokenizer, model, data_args, seed)(examples)

    assert batch(3)["input_ids"].tolist() == batch(3)["input_ids"].tolist() != batch(4)["input_ids"].tolist()
    labels = batch(3)["labels"].tolist()
    start = model.config.decoder_start_token_id
    assert batch(3)["decoder_input_ids"].tolist() == [[start, *row[:-1]] for row in labels]
