"""The model's input checks (`checks_elmo.py`): inputs that used to crash deep inside torch or give wrong answers are
clear errors naming the problem."""

import pytest
import torch


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
