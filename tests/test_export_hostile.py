"""The export path driven as a PyTorch user drives it: a head exported with its labels as an input (dynamic batch
and length) gives the eager model's logits and loss, including a batch without a labelled word."""

import pytest
import torch
from conftest import tiny_config

from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification


def padded_batch(lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random character ids of sentences of `lengths` words, right-padded."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 262, (len(lengths), max(lengths), 50), generator=generator)
    mask = (torch.arange(max(lengths)) < torch.tensor(lengths).unsqueeze(1)).long()
    return ids * mask.unsqueeze(-1), mask


def labels_for(head, mask: torch.Tensor, labelled: bool) -> torch.Tensor:
    """Token labels (-100 on padding, or everywhere) or sentence labels for `mask`'s batch."""
    if isinstance(head, ElmoForSequenceClassification):
        return torch.randint(0, 3, mask.shape[:1]) if labelled else torch.full(mask.shape[:1], -100)
    labels = torch.randint(0, 3, mask.shape).masked_fill(mask == 0, -100)
    return labels if labelled else torch.full_like(labels, -100)


@pytest.mark.parametrize("head_class", [ElmoForTokenClassification, ElmoForSequenceClassification])
def test_torch_export_of_a_head_with_labels_equals_eager(head_class):
    """The label checks and the no-labelled-word branch read the labels' values, which torch.export cannot trace
    (GuardOnDataDependentSymNode); the exported head checks nothing and selects with `torch.where` instead."""
    torch.manual_seed(0)
    head = head_class(tiny_config(num_labels=3)).eval()
    ids, mask = padded_batch([3, 2], seed=0)
    batch, words = torch.export.Dim("batch_size"), torch.export.Dim("sequence_length")
    label_shape = {0: batch} if head_class is ElmoForSequenceClassification else {0: batch, 1: words}
    shapes = {"input_ids": {0: batch, 1: words}, "attention_mask": {0: batch, 1: words}, "labels": label_shape}
    with torch.no_grad():
        program = torch.export.export(
            head, (ids,), {"attention_mask": mask, "labels": labels_for(head, mask, True)}, dynamic_shapes=shapes
        )
    exported = program.module()
    for lengths, labelled in (([1, 4, 1], True), ([2, 7, 3], True), ([5], True), ([4, 2], False)):
        ids, mask = padded_batch(lengths, seed=len(lengths))
        labels = labels_for(head, mask, labelled)
        with torch.no_grad():
            actual = exported(ids, attention_mask=mask, labels=labels)
            expected = head(ids, attention_mask=mask, labels=labels)
        torch.testing.assert_close(actual.logits, expected.logits, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(actual.loss, expected.loss, atol=1e-6, rtol=1e-5)
    assert float(expected.loss) == 0.0  # the last batch has no labelled item



@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_training_a_head_under_torch_compile_fullgraph_on_the_export_path_equals_eager(backend):
    """`torch.compile(fullgraph=True)` of a tagger on the export path, trained: the scalar mix's inference-tensor
    check (`Tensor.is_inference()`, which Dynamo cannot trace) broke the graph, and the no-labelled-word branch's
    `torch.cond` failed inductor's backward. Loss and gradients equal eager's; a batch without a labelled word, its
    items counted as none over the accumulated batches, gives a loss of 0 and zero gradients, not NaN."""
    torch.manual_seed(0)
    head = ElmoForTokenClassification(tiny_config(num_labels=3, elmo_implementation="export", elmo_dropout=0.0))
    head.train()
    compiled = torch.compile(head, fullgraph=True, backend=backend)
    ids, mask = padded_batch([3, 2], seed=0)
    for labelled, items in ((True, None), (False, torch.tensor(0))):
        labels = labels_for(head, mask, labelled)
        results = []
        for model in (head, compiled):
            head.zero_grad()
            kwargs = {} if items is None else {"num_items_in_batch": items}
            loss = model(ids, attention_mask=mask, labels=labels, **kwargs).loss
            loss.backward()
            gradients = {name: p.grad.clone() for name, p in head.named_parameters() if p.grad is not None}
            results.append((loss.detach(), gradients))
        (expected, expected_gradients), (actual, gradients) = results
        torch.testing.assert_close(actual, expected, atol=1e-6, rtol=1e-5)
        assert gradients.keys() == expected_gradients.keys() and gradients
        for name, gradient in gradients.items():
            torch.testing.assert_close(gradient, expected_gradients[name], atol=1e-6, rtol=1e-5, msg=name)
        if not labelled:
            assert float(actual) == 0.0 and all(not gradient.any() for gradient in gradients.values())
