"""The model's input checks (`checks_elmo.py`): inputs that used to crash deep inside torch or give wrong answers are
clear errors naming the problem."""

import pytest
import torch
from conftest import tiny_config

from elmo_hf import ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification


def test_attention_mask_as_a_list_is_a_clear_error(tiny_model, batch):
    with pytest.raises(TypeError, match="attention_mask must be a torch.Tensor, got list"):
        tiny_model(batch["input_ids"], attention_mask=batch["attention_mask"].tolist())


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
def test_narrow_integer_input_ids_are_refused_not_misread(tiny_model, batch, dtype):
    """uint8 wraps 259/260 (begin/end of word) around; the old range check compared in uint8 and named wrong values."""
    with pytest.raises(TypeError, match=f"dtype {dtype}, which cannot hold character ids up to 261"):
        tiny_model(batch["input_ids"].to(dtype), attention_mask=batch["attention_mask"])


def test_out_of_range_ids_are_reported_with_their_real_values(tiny_model, batch):
    ids = batch["input_ids"].to(torch.int16)
    ids[0, 0, 1] = 300
    with pytest.raises(ValueError, match=r"outside 0\.\.261 \(found 0\.\.300\)"):
        tiny_model(ids, attention_mask=batch["attention_mask"])
    outputs = tiny_model(batch["input_ids"].to(torch.int16), attention_mask=batch["attention_mask"])
    torch.testing.assert_close(outputs.last_hidden_state, tiny_model(**batch).last_hidden_state, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_wide_unsigned_input_ids_read_as_the_same_ids(tiny_model, batch, dtype):
    """torch cannot reduce or compare uint16..uint64 on CPU: the range check ("min_all" not implemented) and a head's
    word mask failed deep inside torch. These dtypes hold every id, so they read as the int64 ids do."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    expected = tiny_model(ids, attention_mask=mask).last_hidden_state
    for given_mask in (mask, None):
        outputs = tiny_model(ids.to(dtype), attention_mask=given_mask)
        torch.testing.assert_close(outputs.last_hidden_state, expected, atol=0, rtol=0)
    bad = ids.clone()
    bad[0, 0, 1] = 300
    with pytest.raises(ValueError, match=r"outside 0\.\.261 \(found 0\.\.300\)"):
        tiny_model(bad.to(dtype))
    torch.manual_seed(0)
    head = ElmoForTokenClassification(tiny_config(num_labels=2)).eval()
    torch.testing.assert_close(head(ids.to(dtype)).logits, head(ids).logits, atol=0, rtol=0)


def token_head() -> ElmoForTokenClassification:
    torch.manual_seed(0)
    return ElmoForTokenClassification(tiny_config(num_labels=3, elmo_dropout=0.0)).eval()


def sequence_head(num_labels: int, problem_type: str | None = None) -> ElmoForSequenceClassification:
    torch.manual_seed(0)
    return ElmoForSequenceClassification(
        tiny_config(num_labels=num_labels, problem_type=problem_type, elmo_dropout=0.0)
    ).eval()


TOKEN_LABELS = torch.tensor([[1, 0, 2], [2, -100, -100]])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16])
def test_token_labels_of_any_integer_dtype_give_the_int64_loss(batch, dtype):
    """int32 labels (numpy's default integer on Windows) failed deep inside the cross-entropy ("expected target dtype
    to be Long or Byte, but got Int")."""
    head = token_head()
    expected = head(**batch, labels=TOKEN_LABELS).loss
    torch.testing.assert_close(head(**batch, labels=TOKEN_LABELS.to(dtype)).loss, expected, atol=0, rtol=0)


def test_unsigned_token_labels_are_ids_and_cannot_mark_padding(batch):
    """uint8 labels are read as int64 ids; on a padded batch they cannot hold -100, so a padding position gets a
    label, which is refused (it was trained on)."""
    head = token_head()
    first = {name: value[:1] for name, value in batch.items()}  # the sentence without padding
    expected = head(**first, labels=TOKEN_LABELS[:1]).loss
    torch.testing.assert_close(head(**first, labels=TOKEN_LABELS[:1].to(torch.uint8)).loss, expected, atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"row 1 .*padding.*torch.uint8 cannot hold -100"):
        head(**batch, labels=TOKEN_LABELS.clamp(min=0).to(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_token_labels_that_are_not_class_ids_are_a_clear_error(batch, dtype):
    with pytest.raises(TypeError, match=f"labels must hold integer class ids, got dtype {dtype}"):
        token_head()(**batch, labels=TOKEN_LABELS.clamp(min=0).to(dtype))


def test_integer_regression_targets_are_targets_not_class_ids(batch):
    """With num_labels=1 (regression), integer targets (ratings 1..5) were refused as class ids outside 0..0."""
    head = sequence_head(1)
    expected = head(**batch, labels=torch.tensor([4.0, 1.0])).loss
    torch.testing.assert_close(head(**batch, labels=torch.tensor([4, 1])).loss, expected, atol=0, rtol=0)
    assert head.config.problem_type == "regression"


def test_integer_class_ids_of_any_dtype_are_single_label(batch):
    """transformers reads int16 or uint8 class ids as multi-label targets (only int64 and int32 are class ids to it),
    failed deep inside the binary cross-entropy and left `problem_type` multi-label for every later call."""
    head = sequence_head(3)
    loss = head(**batch, labels=torch.tensor([2, 0], dtype=torch.int16)).loss
    assert head.config.problem_type == "single_label_classification"
    torch.testing.assert_close(loss, sequence_head(3)(**batch, labels=torch.tensor([2, 0])).loss, atol=0, rtol=0)


def test_multi_label_targets_may_be_integers_or_bools(batch):
    """Multi-hot targets given as integers (explicit multi-label) or bools (read as multi-label, as transformers
    does) failed inside the binary cross-entropy; they are the float targets they stand for."""
    targets = torch.tensor([[1, 0, 1], [0, 0, 0]])
    expected = sequence_head(3, "multi_label_classification")(**batch, labels=targets.float()).loss
    for problem_type, labels in (("multi_label_classification", targets), (None, targets.bool())):
        head = sequence_head(3, problem_type)
        torch.testing.assert_close(head(**batch, labels=labels).loss, expected, atol=0, rtol=0)
        assert head.config.problem_type == "multi_label_classification"


@pytest.mark.parametrize(
    ("problem_type", "labels", "error", "message"),
    [
        (None, torch.tensor([2.0, 0.0]), ValueError, r"multi-label labels must have shape \(batch_size, num_labels"),
        ("single_label_classification", torch.tensor([2.0, 0.0]), TypeError, "must hold integer class ids"),
        ("single_label_classification", torch.ones(2, 3), TypeError, "must hold integer class ids"),
        ("multi_label_classification", torch.ones(2, 3, 1), ValueError, r"must have shape \(batch_size, num_labels"),
        ("regression", torch.ones(2), ValueError, r"regression labels must have shape \(batch_size, num_labels"),
    ],
)
def test_sequence_labels_that_do_not_fit_the_problem_type_are_a_clear_error(
    batch, problem_type, labels, error, message
):
    """Each failed deep inside torch's losses ("Target size must be the same as input size", "expected target dtype
    to be Long")."""
    with pytest.raises(error, match=message):
        sequence_head(3, problem_type)(**batch, labels=labels)


def test_pretraining_labels_are_checked_like_the_heads_labels(batch):
    """A list failed with AttributeError inside the check, int32 ids inside the cross-entropy."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config(word_vocab_size=5)).eval()
    labels = torch.tensor([[1, 2, 3, 0], [4, 0, -100, -100]])
    backward_labels = torch.tensor([[0, 1, 2, 3], [0, 4, -100, -100]])
    expected = model(**batch, labels=labels, backward_labels=backward_labels).loss
    loss = model(**batch, labels=labels.int(), backward_labels=backward_labels.int()).loss
    torch.testing.assert_close(loss, expected, atol=0, rtol=0)
    with pytest.raises(TypeError, match="labels must be a torch.Tensor, got list"):
        model(**batch, labels=labels.tolist(), backward_labels=backward_labels)
    with pytest.raises(TypeError, match="backward_labels must hold integer class ids, got dtype torch.float32"):
        model(**batch, labels=labels, backward_labels=backward_labels.float())
