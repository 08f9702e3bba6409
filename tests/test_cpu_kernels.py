"""The CPU kernels (`cpu_kernels.py`): equal to the reference modules, taken only where they compute the same thing,
never serving stale weights, bounded on long inputs."""

import gc
import json
import math
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from conftest import MIXED_SENTENCES as SENTENCES
from conftest import encode, random_linears, tiny_config
from torch import nn

from elmo_hf import ElmoConfig, ElmoModel, cpu_kernels
from elmo_hf.cpu_kernels import (
    BLOCKED,
    PLAIN,
    REORDERED,
    REORDERED_SINGLE_ROW,
    BlockedRows,
    CpuLinear,
    RecurrentLinear,
    ReorderedWeights,
    ReorderTimings,
)
from elmo_hf.kernels_elmo import RECURRENCE_IMPLEMENTATIONS, TOKEN_LAYER_IMPLEMENTATIONS, Implementation
from elmo_hf.reference_elmo import SequenceBatch, group_rows, key_coefficients, lstm_recurrence


def eager_copy(model: ElmoModel) -> ElmoModel:
    """A model with the same weights that always runs the reference modules."""
    reference = ElmoModel(tiny_config(**model.config.to_diff_dict())).to(next(model.parameters()).dtype).eval()
    reference.config.elmo_implementation = "eager"
    reference.load_state_dict(model.state_dict())
    return reference


@pytest.fixture
def kernel_calls(monkeypatch) -> list[str]:
    """The names of the CPU kernels the model runs, in call order."""
    calls = []
    for table in (TOKEN_LAYER_IMPLEMENTATIONS, RECURRENCE_IMPLEMENTATIONS):
        kernel = table["cpu"]
        name = kernel.function.__name__

        def recorded(*args, kernel=kernel, name=name):
            calls.append(name)
            return kernel.function(*args)

        monkeypatch.setitem(table, "cpu", Implementation(recorded, kernel.supports))
    return calls


def assert_layers_close(actual, expected, atol=1e-5):
    for actual_layer, expected_layer in zip(actual, expected, strict=True):
        torch.testing.assert_close(actual_layer.to(expected_layer.dtype), expected_layer, atol=atol, rtol=0)


def test_kernels_equal_the_reference_statefully(tiny_model, tokenizer, kernel_calls):
    """All layers and the state, threading `lstm_state` through batches of different sizes."""
    reference = eager_copy(tiny_model)
    fast_state = reference_state = None
    for sentences in (SENTENCES, SENTENCES[3:], SENTENCES[:4][::-1]):
        inputs = encode(tokenizer, sentences)
        with torch.inference_mode():
            fast = tiny_model(**inputs, lstm_state=fast_state, output_lstm_state=True, output_hidden_states=True)
            kernels_run = len(kernel_calls)
            plain = reference(**inputs, lstm_state=reference_state, output_lstm_state=True, output_hidden_states=True)
        assert kernels_run == 1 + 2 * 2 and len(kernel_calls) == kernels_run  # token layer and 4 cells; eager: none
        assert_layers_close(fast.hidden_states, plain.hidden_states)
        assert_layers_close(fast.lstm_state, plain.lstm_state)
        fast_state, reference_state = fast.lstm_state, plain.lstm_state
        kernel_calls.clear()


def test_kernels_equal_a_float64_reference_with_autograd(tiny_model, tokenizer):
    reference = ElmoModel(tiny_config()).double()
    reference.load_state_dict(tiny_model.state_dict())
    inputs = encode(tokenizer, SENTENCES)
    with torch.inference_mode():
        fast = tiny_model(**inputs, output_hidden_states=True).hidden_states
    plain = reference(**inputs, output_hidden_states=True).hidden_states
    assert plain[-1].requires_grad
    assert_layers_close(fast, [layer.detach() for layer in plain])


@pytest.mark.parametrize("name", ["small", "original"])
def test_kernels_equal_the_reference_on_published_architectures(tokenizer, name):
    """Random weights of the published shapes (where the kernels choose other products than for tiny ones)."""
    shapes = {
        "small": dict(lstm_dim=1024, projection_dim=128, num_highway_layers=1),
        "original": dict(lstm_dim=4096, projection_dim=512, num_highway_layers=2),
    }
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**shapes[name])).eval()
    reference = eager_copy(model)
    inputs = encode(tokenizer, [["The", "cat", "sat", "."], ["Dogs", "bark", "loudly"], ["Hi"]])
    with torch.inference_mode():
        assert_layers_close(model(**inputs, output_hidden_states=True).hidden_states,
                            reference(**inputs, output_hidden_states=True).hidden_states)


def test_dispatcher_takes_the_kernels_only_where_they_compute_the_same(tiny_model, tokenizer, kernel_calls):
    inputs = encode(tokenizer, SENTENCES)

    def kernels_used(model=tiny_model, **kwargs) -> list[str]:
        kernel_calls.clear()
        model(**inputs, **kwargs)
        return list(kernel_calls)

    everything = ["encode_words"] + ["lstm_with_projection"] * 4
    with torch.inference_mode():
        assert kernels_used() == everything
    with torch.no_grad():
        assert kernels_used() == everything
    assert kernels_used() == []  # autograd records the trainable weights
    tiny_model.requires_grad_(False)
    assert kernels_used() == everything  # nothing to record
    tiny_model.requires_grad_(True)
    with torch.inference_mode():
        assert kernels_used(ElmoModel(tiny_config()).double().eval()) == []
        tiny_model.config.elmo_implementation = "eager"
        assert kernels_used() == []
        tiny_model.config.elmo_implementation = "auto"
        handle = tiny_model.token_encoder.highway.layers[0].gate.register_forward_hook(lambda *args: None)
        assert kernels_used() == ["lstm_with_projection"] * 4
        handle.remove()
        handle = tiny_model.bilm.layers[1].backward_cell.register_forward_pre_hook(lambda *args: None)
        assert kernels_used() == ["encode_words"] + ["lstm_with_projection"] * 3
        handle.remove()
        handle = nn.modules.module.register_module_forward_hook(lambda *args: None)
        assert kernels_used() == []
        handle.remove()
        assert kernels_used() == everything


def test_replaced_or_parametrized_layers_take_the_reference(tiny_model, tokenizer, kernel_calls):
    """A subclass of `nn.Linear` (as wrappers and quantised layers are) or a parametrization is never bypassed."""

    class ScaledLinear(nn.Linear):
        def forward(self, inputs):
            return 2 * super().forward(inputs)

    inputs = encode(tokenizer, SENTENCES)
    cell = tiny_model.bilm.layers[0].forward_cell
    with torch.inference_mode():
        before = tiny_model(**inputs).last_hidden_state
    scaled = ScaledLinear(cell.projection.in_features, cell.projection.out_features, bias=False)
    scaled.load_state_dict(cell.projection.state_dict())
    cell.projection = scaled
    kernel_calls.clear()
    with torch.inference_mode():
        changed = tiny_model(**inputs).last_hidden_state
    assert kernel_calls == ["encode_words"] + ["lstm_with_projection"] * 3
    assert not torch.allclose(changed, before)
    torch.nn.utils.parametrize.register_parametrization(
        tiny_model.token_encoder.projection, "weight", ZeroParametrization()
    )
    kernel_calls.clear()
    with torch.inference_mode():
        zero_tokens = tiny_model(**inputs, output_hidden_states=True).hidden_states[0]
    assert "encode_words" not in kernel_calls and torch.all(zero_tokens == zero_tokens[0, 0, 0])


class ZeroParametrization(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(weight)


def test_each_distinct_word_goes_through_the_char_cnn_once(tiny_model, tokenizer):
    encoded_rows = []
    tiny_model.token_encoder.char_cnn.register_forward_hook(
        lambda module, args, output: encoded_rows.append(len(output))
    )
    with torch.inference_mode():
        tiny_model(**encode(tokenizer, SENTENCES))
    distinct = {word for words in SENTENCES for word in words}
    assert sum(encoded_rows) == len(distinct) + 2  # and <S>, </S>


def test_long_document_runs(tiny_model):
    """A 5,000-word document in one call: memory grows linearly with the words (see `test_blocks_...` below)."""
    torch.manual_seed(1)
    char_ids = torch.randint(1, 262, (1, 5000, tiny_model.config.max_characters_per_token))
    threads = torch.get_num_threads()
    # One thread: the tiny model's 5,000 steps are too small to share, and a busy machine makes sharing them slow.
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            top = tiny_model(input_ids=char_ids).last_hidden_state
    finally:
        torch.set_num_threads(threads)
    assert top.shape == (1, 5000, tiny_model.config.hidden_size)
    assert torch.isfinite(top).all() and torch.all(top.abs().sum(-1) > 0)


def test_blocks_of_words_and_of_gate_inputs_do_not_change_the_result(tiny_model, tokenizer, monkeypatch):
    """The char CNN runs on chunks of words and the input-to-gate products on blocks of rows (bounded memory for any
    length); small chunks and blocks give the result of one chunk and one block."""
    inputs = encode(tokenizer, SENTENCES)
    with torch.inference_mode():
        monkeypatch.setattr(cpu_kernels, "GATE_INPUT_BLOCK_ROWS", 3)
        monkeypatch.setattr(tiny_model.token_encoder, "chunk_size", 2)
        blocked = tiny_model(**inputs, output_hidden_states=True).hidden_states
        monkeypatch.setattr(cpu_kernels, "GATE_INPUT_BLOCK_ROWS", 10**9)
        monkeypatch.setattr(tiny_model.token_encoder, "chunk_size", 10**9)
        whole = tiny_model(**inputs, output_hidden_states=True).hidden_states
    assert_layers_close(blocked, whole, atol=1e-6)


def test_repeated_inputs_are_multiplied_once_with_the_bits_of_every_row(tiny_model, tokenizer, monkeypatch):
    """A word's token vector is the same wherever it stands, so the first layer's input-to-gate products are made once
    per distinct row (the steps gather theirs) with the bits of multiplying every row; the layer above, whose inputs
    do not repeat, multiplies every row."""
    multiplied = []
    run_rows = cpu_kernels.StepThreads.run_rows

    def counted(self, name, step, rows):
        if name.startswith("input to gates"):
            multiplied.append(len(rows))
        return run_rows(self, name, step, rows)

    monkeypatch.setattr(cpu_kernels.StepThreads, "run_rows", counted)
    sentences = [["the", "cat", "saw", "the", "dog", "."], ["the", "dog", "saw", "a", "cat", "."], ["."]]
    inputs = encode(tokenizer, sentences)
    results, default = {}, cpu_kernels.REPEATED_SHARE
    for share in (default, 2.0):  # 2.0: never enough repeats, every row multiplied
        monkeypatch.setattr(cpu_kernels, "REPEATED_SHARE", share)
        multiplied.clear()
        with torch.inference_mode():
            results[share] = tiny_model(**inputs, output_hidden_states=True, output_lstm_state=True)
        results[share, "rows"] = list(multiplied)
    once, every = results[default], results[2.0]
    once_rows, every_rows = results[default, "rows"], results[2.0, "rows"]
    assert len(once_rows) == len(every_rows) == 4  # one product for each of the four cells, layer 0's first
    assert all(fewer < all_rows for fewer, all_rows in zip(once_rows[:2], every_rows[:2])), (once_rows, every_rows)
    assert once_rows[2:] == every_rows[2:]
    for value, expected in zip((*once.hidden_states, *once.lstm_state), (*every.hidden_states, *every.lstm_state)):
        assert torch.equal(value, expected)


def test_group_rows_groups_the_words_of_a_batch_as_sorting_them_does(tokenizer):
    """`group_rows` over character-id rows (keyed by weighted sums of all their bytes) finds the groups that sorting
    the rows finds, each row's bytes in its group's first row."""
    sentences = [sentence * 3 for sentence in SENTENCES] + [["a", "ab", "ba", "b" * 60, "b" * 61]]
    encoded = tokenizer(sentences, is_split_into_words=True, return_tensors="pt", padding=True)
    words = encoded["input_ids"][encoded["attention_mask"].bool()]
    first, places = group_rows(words)
    distinct, sorted_places = torch.unique(words, dim=0, return_inverse=True)
    assert torch.equal(words[first[places]], words)
    assert len(first) == len(distinct) < len(words)
    assert len(set(zip(places.tolist(), sorted_places.tolist()))) == len(distinct)  # the same partition


def test_group_rows_tells_apart_rows_whose_keys_agree():
    """Rows whose keys agree but whose bytes differ are grouped apart (by sorting the rows themselves): two weighted
    sums made to cancel, and rows alike in their first `key_bytes` only."""
    coefficients = key_coefficients(3)
    rows = torch.zeros(4, 3, dtype=torch.int32)
    rows[1, 0], rows[1, 1] = int(coefficients[1]), -int(coefficients[0])
    rows[3] = rows[1]
    assert torch.equal(torch.mv(rows.long(), coefficients), torch.zeros(4, dtype=torch.int64))  # one key for all
    first, places = group_rows(rows)
    assert torch.equal(rows[first[places]], rows)
    assert places[0] == places[2] != places[1] == places[3]
    rows = torch.zeros(3, 3, dtype=torch.int32)
    rows[1, 2] = 5  # beyond the first 8 bytes
    first, places = group_rows(rows, key_bytes=8)
    assert torch.equal(rows[first[places]], rows) and places[0] == places[2] != places[1]


def test_group_rows_takes_rows_of_any_width_and_offset():
    """Rows of a width that is no multiple of 4 bytes, rows at an offset that is no multiple of 4 bytes, rows of no
    bytes (all alike: one group), and no rows at all."""
    flat = torch.arange(200, dtype=torch.uint8) % 7
    rows = flat[1:196].view(15, 13)  # 13-byte rows from byte 1, repeating every 7 rows
    first, places = group_rows(rows)
    assert torch.equal(rows[first[places]], rows) and len(first) == 7
    values = torch.randn(12, 6).to(torch.bfloat16)
    values[9:] = values[:3]
    flat = torch.cat([values.new_zeros(1), values.view(-1)])
    rows = flat[1:].view(12, 6)  # 12-byte rows at a 2-byte offset
    first, places = group_rows(rows)
    assert torch.equal(rows[first[places]], rows) and len(first) == 9
    first, places = group_rows(torch.zeros(0, 50, dtype=torch.int64))
    assert first.shape == places.shape == (0,)
    for rows in (torch.zeros(3, 0, dtype=torch.int64), torch.zeros(3, 0)):
        for key_bytes in (None, 8):
            first, places = group_rows(rows, key_bytes=key_bytes)
            assert first.tolist() == [0] and places.tolist() == [0, 0, 0]


def test_distinct_rows_are_found_byte_for_byte():
    """Rows alike in their first 8 bytes only, and a signed zero, are distinct; too few repeats find nothing."""
    values = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    rows = values[torch.tensor([0, 1, 0, 2, 0, 1, 3, 4, 5, 0])]
    rows[3, :2] = rows[0, :2]  # like row 0 in the first 8 bytes, not beyond
    rows[8] = 0.0
    rows[9] = 0.0
    rows[9, 4] = -0.0
    first, places = cpu_kernels.distinct_rows(rows)
    assert torch.equal(rows[first[places]], rows)
    assert len(first) == 7 and len(set(places.tolist())) == 7
    assert places[0] == places[2] == places[4] and places[1] == places[5] and places[3] != places[0]
    assert places[8] != places[9]
    assert cpu_kernels.distinct_rows(values) is None
    assert cpu_kernels.distinct_rows(values[torch.tensor([0, 1, 2, 3, 4, 5, 0, 1, 2])]) is not None  # 3 of 9 repeat


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_other_dtypes_run_close_to_float32(tiny_model, tokenizer, dtype):
    inputs = encode(tokenizer, SENTENCES)
    other = ElmoModel(tiny_config()).to(dtype).eval()
    other.load_state_dict(tiny_model.state_dict())
    with torch.inference_mode():
        expected = tiny_model(**inputs).last_hidden_state
        actual = other(**inputs, output_lstm_state=True)
        assert_layers_close([actual.last_hidden_state], [eager_copy(other)(**inputs).last_hidden_state], atol=1e-2)
    assert actual.last_hidden_state.dtype == dtype and actual.lstm_state[1].dtype == dtype
    tolerance = 0.1 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(actual.last_hidden_state.float(), expected, atol=tolerance, rtol=0)


@pytest.mark.parametrize("rows", [1, 2, 5, 40, 300])
@pytest.mark.parametrize("with_add", [False, True])
def test_every_product_agrees_with_linear(rows, with_add):
    torch.manual_seed(0)
    linear = nn.Linear(10, 24)
    weight, bias = linear.weight.detach(), linear.bias.detach()
    inputs, add = torch.randn(rows, 10), torch.randn(rows, 24) if with_add else None
    expected = nn.functional.linear(inputs, weight, bias) + (add if with_add else 0)
    with torch.inference_mode():
        for product in (
            cpu_kernels.onednn_linear(inputs, weight, bias, add),
            cpu_kernels.onednn_linear(inputs, cpu_kernels.reorder_weight(weight), bias, add),
            CpuLinear(weight, bias)(inputs, add),
        ):
            torch.testing.assert_close(product, expected, atol=1e-5, rtol=1e-5)
        recurrent = RecurrentLinear(linear, row_counts=[rows] * 10_000)
        torch.testing.assert_close(recurrent(inputs, add), expected - bias, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(64, 8), (4 * 1024, 128), (128, 1024), (512, 4096)])
def test_every_recurrent_kernel_gives_the_same_bits(shape):
    """Why kernels may be chosen by timing without costing determinism across processes: every kernel
    `ReorderTimings` may pick for a recurrent product gives bitwise the result of oneDNN's product of two rows or
    more on the plain weight, a single row included (computed as two copies of itself)."""
    torch.manual_seed(0)
    weight = torch.randn(*shape)
    reordered = cpu_kernels.reorder_weight(weight)
    with torch.inference_mode():
        for rows in (1, 2, 3, 8, 64):
            kernels = ReorderTimings.product(weight, rows, torch.get_num_threads())
            assert PLAIN in kernels and (rows == 1 or REORDERED in kernels)
            inputs, add = torch.randn(rows, shape[1]), torch.randn(rows, shape[0])
            expected = cpu_kernels.onednn_linear(inputs.repeat(2, 1), weight, None, add.repeat(2, 1))[:rows]
            assert torch.equal(cpu_kernels.recurrent_product(inputs, weight, add), expected)
            assert torch.equal(cpu_kernels.recurrent_product(inputs, reordered, add), expected)
            if cpu_kernels.REORDERED_SINGLE_ROW in kernels:
                assert torch.equal(cpu_kernels.onednn_linear(inputs, reordered, None, add), expected)
            # and a row's bits do not depend on the rows beside it (what computing alike rows once relies on)
            last = slice(rows - 1, rows)
            assert torch.equal(cpu_kernels.recurrent_product(inputs[last], weight, add[last]), expected[last])


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=[1, 2, 3])
def thread_count(request):
    """torch's thread count for the test: one, two, three (the blocked kernel splits its outputs over them)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(threads)


def blocked_kernel_runs_here() -> bool:
    """Whether this machine has what `BlockedRows` needs: x86-64 Linux, AVX2 and FMA, a C compiler."""
    capabilities = torch.cpu.get_capabilities()
    return (
        sys.platform.startswith("linux")
        and platform.machine() in ("x86_64", "AMD64")
        and capabilities.get("avx2", False)
        and capabilities.get("fma3", False)
        and shutil.which(os.environ.get("CC") or "cc") is not None
    )


def test_the_blocked_kernel_is_built_where_the_cpu_and_a_compiler_allow():
    """Capability first: `BlockedRows` runs on x86-64 Linux with AVX2 and FMA where a C compiler builds it (as
    on the machines CI runs on), and nowhere else."""
    assert (BlockedRows.function() is not None) == blocked_kernel_runs_here()


@pytest.mark.parametrize("shape", [(8, 8), (40, 24), (64, 8), (4 * 1024, 128), (128, 1024), (512, 4096), (16, 3000)])
@pytest.mark.parametrize("bucket", [1, 2, 4, 8, 64])
def test_the_blocked_kernel_gives_onednns_bits(thread_count, shape, bucket):
    """The contract of the blocked kernel: where `ReorderTimings` offers it (float32, a multiple of 8 outputs), its
    product with the input block it found gives bitwise oneDNN's product on the plain weight, on any thread count,
    for other inputs than those it was found on and every row count of the bucket (tiles of 1 to 6 rows, 1 to 4
    column blocks), with and without the addend; 512 and 4096 inputs (the original architecture's) split their sums
    as oneDNN does on this CPU."""
    torch.manual_seed(1)
    weight = torch.randn(*shape)
    with torch.inference_mode():
        kernels = ReorderTimings.product(weight, bucket, thread_count)
        if BlockedRows.function() is None:
            assert BLOCKED not in kernels
            return
        if shape[1] in (512, 4096):  # found by the search on the CPUs measured: blocks of oneDNN's split
            assert BLOCKED in kernels
        if BLOCKED not in kernels:
            return
        k_block = ReorderTimings.k_block(weight, bucket, thread_count)
        blocked = cpu_kernels.blocked_weight(weight)
        for rows in sorted({max(1, bucket // 2 + 1), (bucket + 1) // 2 + bucket // 4 + 1, bucket}):
            inputs, add = torch.randn(rows, shape[1]), torch.randn(rows, shape[0])
            for addend in (None, add):
                expected = cpu_kernels.recurrent_product(inputs, weight, addend)
                assert torch.equal(BlockedRows.product(inputs, blocked, addend, k_block), expected)


def test_the_blocked_kernel_splits_its_products_over_torchs_own_threads(monkeypatch):
    """Where torch runs on OpenMP, the blocked kernel's threads are torch's (its runtime's `GOMP_parallel`, found in
    this process); without a runtime the calling thread computes every slice, with the same bits."""
    assert (cpu_kernels.openmp_parallel_region() is not None) == torch._C.has_openmp
    if BlockedRows.function() is None:
        return
    weight, inputs, add = torch.randn(96, 40), torch.randn(7, 40), torch.randn(7, 96)
    blocked = cpu_kernels.blocked_weight(weight)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        shared = BlockedRows.product(inputs, blocked, add, 40)
        monkeypatch.setattr(cpu_kernels, "openmp_parallel_region", lambda: None)
        alone = BlockedRows.product(inputs, blocked, add, 40)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(shared, alone)
    assert torch.allclose(shared, inputs @ weight.T + add, rtol=1e-5, atol=1e-5)


def test_the_blocked_kernel_is_found_or_refused_by_its_bits(one_thread, monkeypatch):
    """The search takes no input block whose bits differ: a product that misses by one ulp, on any of the thread
    counts compared, is refused."""
    weight = torch.randn(64, 32)
    blocked = cpu_kernels.blocked_weight(weight)
    inputs, add = torch.randn(1, 32), torch.randn(1, 64)
    expected = [cpu_kernels.recurrent_product(inputs, weight, addend) for addend in (None, add)]
    if BlockedRows.function() is None:
        assert BlockedRows.find_k_block(blocked, inputs, (None, add), [expected]) is None
        return
    assert BlockedRows.find_k_block(blocked, inputs, (None, add), [expected]) == 32
    other = [expected[0], expected[1].clone()]
    other[1][0, 5] = torch.nextafter(other[1][0, 5], torch.tensor(math.inf))
    assert BlockedRows.find_k_block(blocked, inputs, (None, add), [other]) is None
    # another thread count's bits, where they differ, refuse it too
    assert BlockedRows.find_k_block(blocked, inputs, (None, add), [expected, other]) is None


def test_the_blocked_kernel_builds_once_without_a_cache_and_not_without_a_compiler(monkeypatch, tmp_path):
    """The library is built into `$ELMO_HF_CACHE` once (removing what a process killed while building left there) and
    loaded from it later, into a temporary folder where the cache is off or its library does not load; without a
    compiler there is no kernel (the others run)."""
    function = BlockedRows.function.__func__
    orphan = tmp_path / "blocked-rows-0123456789abcdef.so.12345.tmp"  # left by a process killed while building
    orphan.write_bytes(b"")
    os.utime(orphan, (time.time() - 2 * cpu_kernels.ORPHAN_SECONDS,) * 2)
    try:
        for cache in (str(tmp_path), ""):
            monkeypatch.setenv("ELMO_HF_CACHE", cache)
            function.cache_clear()
            loaded = BlockedRows.function()
            if not blocked_kernel_runs_here():
                assert loaded is None
                continue
            assert loaded is not None
        if blocked_kernel_runs_here():
            [library] = tmp_path.glob("blocked-rows-*.so")
            assert not list(tmp_path.glob("*.tmp"))
            damaged = tmp_path / "damaged"
            damaged.write_bytes(b"not a library")
            damaged.replace(library)  # a library that does not load (a new file: the loaded one stays mapped)
            monkeypatch.setenv("ELMO_HF_CACHE", str(tmp_path))
            function.cache_clear()
            assert BlockedRows.function() is not None
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
        function.cache_clear()
        assert BlockedRows.function() is None
        monkeypatch.setenv("CC", "false")  # a compiler that fails
        monkeypatch.setenv("ELMO_HF_CACHE", str(tmp_path / "other"))
        function.cache_clear()
        assert BlockedRows.function() is None
        assert not list((tmp_path / "other").glob("*"))
    finally:
        monkeypatch.undo()
        function.cache_clear()


def test_a_model_at_batch_1_takes_the_blocked_kernel_with_the_same_bits(tokenizer, thread_count, monkeypatch):
    """A model at batch 1 multiplies its recurrent weights with `BlockedRows` (where the CPU runs it), and its
    layers are bitwise those of the same model without it, on any thread count."""
    torch.manual_seed(0)
    model = ElmoModel(tiny_config(lstm_dim=32, projection_dim=16)).eval()
    inputs = encode(tokenizer, [["Birds", "fly", "south", "in", "winter", "."]])
    calls = []
    product = BlockedRows.product
    monkeypatch.setattr(BlockedRows, "product", lambda *args: calls.append(1) or product(*args))
    monkeypatch.setattr(ReorderTimings, "saving", classmethod(lambda cls, weight, rows, threads: 1.0))
    with torch.inference_mode():
        blocked = model(**inputs, output_hidden_states=True).hidden_states
        assert bool(calls) == (BlockedRows.function() is not None)
        kernel = ReorderTimings.kernel
        monkeypatch.setattr(
            ReorderTimings, "kernel",
            classmethod(lambda cls, *args: REORDERED if kernel(*args) == BLOCKED else kernel(*args)),
        )  # fmt: skip
        calls.clear()
        without = model(**inputs, output_hidden_states=True).hidden_states
        assert not calls
    for actual, expected in zip(blocked, without, strict=True):
        assert torch.equal(actual, expected)
    ReorderedWeights.clear(model)


def test_a_blocked_copy_is_never_stale(one_thread, monkeypatch):
    """The blocked copy follows its weight as the reordered one does: after a `.data` edit the next call's product is
    that of the edited weight."""
    linear = nn.Linear(32, 64, bias=False)
    key = (64, 32, torch.float32, 1)
    monkeypatch.setitem(ReorderTimings.products, (*key, 1), {PLAIN: 2.0, REORDERED: 1.0, BLOCKED: 0.1})
    monkeypatch.setitem(ReorderTimings.comparisons, key, 0.0)
    monkeypatch.setitem(ReorderTimings.k_blocks, (*key, 1), 32)
    inputs, add = torch.randn(1, 32), torch.randn(1, 64)
    with torch.inference_mode():
        for _ in range(2):
            recurrent = RecurrentLinear(linear, row_counts=[1] * 10)
            assert recurrent.kernels[1, 1][0] == BLOCKED
            expected = cpu_kernels.recurrent_product(inputs, linear.weight, add)
            if BlockedRows.function() is not None:
                assert torch.equal(recurrent(inputs, add), expected)
            linear.weight.data.normal_()
        assert ReorderedWeights.memory_bytes() >= 2 * linear.weight.nbytes
    ReorderedWeights.clear()


def test_a_first_step_of_alike_rows_is_computed_once_with_each_rows_bits(monkeypatch):
    """Rows entering the first step with the same input and state (a stateless call: zero state, one boundary token)
    are computed as one row and copied, giving the bits of computing every row (outputs and final states); a row
    that differs in any byte, a signed zero included, computes every row."""
    linears = random_linears(torch.float32)
    lengths = torch.tensor([6, 6, 5, 4, 4, 3, 1])
    batch = SequenceBatch(lengths, 6, True)
    tokens = torch.randn(7, 6, 5, generator=torch.Generator().manual_seed(0))
    tokens[:, 0] = tokens[0, 0]
    inputs = batch.directions(tokens * (torch.arange(6) < lengths.unsqueeze(1)).unsqueeze(-1))[0]
    zeros = (torch.zeros(7, 5), torch.zeros(7, 7))
    assert cpu_kernels.alike_first_rows(inputs, zeros, 7) == 6
    signed_zero = (zeros[0].clone(), zeros[1])
    signed_zero[0][3, 2] = -0.0
    other_input = inputs.clone()
    other_input[2, 1] += 1
    assert cpu_kernels.alike_first_rows(inputs, signed_zero, 7) == 0
    assert cpu_kernels.alike_first_rows(other_input, zeros, 7) == 0
    with torch.inference_mode():
        once = cpu_kernels.lstm_with_projection(inputs, batch, zeros, linears, 0.6, 0.4)
        monkeypatch.setattr(cpu_kernels, "alike_first_rows", lambda *args: 0)
        every_row = cpu_kernels.lstm_with_projection(inputs, batch, zeros, linears, 0.6, 0.4)
        expected = lstm_recurrence(inputs, batch, zeros, linears, 0.6, 0.4)
    for value, each, reference in zip((once[0], *once[1]), (every_row[0], *every_row[1]), (expected[0], *expected[1])):
        assert torch.equal(value, each)
        torch.testing.assert_close(value, reference, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("start", [0, 1, 2, 3])
def test_same_bytes_reads_views_at_any_offset(start):
    """`same_bytes` compares views at any byte offset (a first step's rows of a model whose projection_dim is odd sit
    at offsets that are no multiple of 8 bytes), by bytes: equal values are the same, a flipped sign of zero is not."""
    flat = torch.zeros(40)
    for other in range(start + 1, 24):
        assert cpu_kernels.same_bytes(flat[start : start + 8], flat[other : other + 8])
    flat[start + 7] = -0.0
    assert not cpu_kernels.same_bytes(flat[start : start + 8], flat[20:28])


@pytest.mark.parametrize("projection_dim", [1, 3, 5])
def test_kernels_run_odd_widths_as_the_reference(tokenizer, projection_dim):
    """A model of odd widths (its rows at offsets that are no multiple of 8 bytes) runs on the kernels, batches
    whose rows share a first step included, as the reference computes it."""
    torch.manual_seed(0)
    model = ElmoModel(tiny_config(projection_dim=projection_dim)).eval()
    inputs = encode(tokenizer, [["The", "cat", "sat", "."], ["A", "dog"], ["Birds", "fly", "south", "in", "winter"]])
    with torch.inference_mode():
        actual = model(**inputs, output_hidden_states=True).hidden_states
        expected = eager_copy(model)(**inputs, output_hidden_states=True).hidden_states
    assert_layers_close(actual, expected)


def test_reordered_copies_are_used_only_where_they_pay(monkeypatch):
    linear = nn.Linear(32, 64, bias=False)
    threads = torch.get_num_threads()
    key = (64, 32, torch.float32, threads)
    with torch.inference_mode():
        monkeypatch.setitem(ReorderTimings.products, (*key, 4), {PLAIN: 2.0, REORDERED: 1.0})
        monkeypatch.setitem(ReorderTimings.products, (*key, 1), {PLAIN: 1.0})
        monkeypatch.setitem(ReorderTimings.comparisons, key, 10.0)
        not_paying = RecurrentLinear(linear, row_counts=[4] * 9 + [1] * 100)  # saves 9 s, checking costs 10 s
        assert {rows: kernel for (rows, _), (kernel, _, _) in not_paying.kernels.items()} == {4: PLAIN, 1: PLAIN}
        paying = RecurrentLinear(linear, row_counts=[4] * 11 + [1])
        chosen = {rows: kernel for (rows, count), (kernel, _, _) in paying.kernels.items() if count == threads}
        assert chosen == {4: REORDERED, 1: PLAIN}
        assert paying.kernels[4, threads][1] is ReorderedWeights.get(linear)
    assert any(line.startswith("64x32 float32") for line in ReorderTimings.summary())
    ReorderedWeights.clear()


def test_the_buckets_of_a_call_are_measured_with_one_reordered_copy(monkeypatch):
    """A first call measures every row bucket its steps use with one reordered copy of the weight (a copy for each
    bucket was a fifth of the measuring time), and buckets measured before are not measured again."""
    weight = torch.randn(64, 32)
    reorders = []
    reorder = cpu_kernels.reorder_weight
    monkeypatch.setattr(cpu_kernels, "reorder_weight", lambda weight: reorders.append(weight) or reorder(weight))
    monkeypatch.setattr(ReorderTimings, "products", {})
    with torch.inference_mode():
        ReorderTimings.measure(weight, [1, 2, 5, 33, 64], threads=1)
        assert len(reorders) == 1
        assert sorted(key[-1] for key in ReorderTimings.products) == [1, 2, 8, 64]
        assert all(REORDERED in timings for key, timings in ReorderTimings.products.items() if key[-1] > 1)
        ReorderTimings.measure(weight, [3, 64], threads=1)
        ReorderTimings.product(weight, 40, threads=1)
        assert len(reorders) == 2 and sorted(key[-1] for key in ReorderTimings.products) == [1, 2, 4, 8, 64]


@pytest.mark.parametrize(
    ("timings", "expected"),
    [({PLAIN: 0.95, REORDERED: 1.0}, REORDERED), ({PLAIN: 0.85, REORDERED: 1.0}, PLAIN),
     ({PLAIN: 2.0, REORDERED: 1.0, REORDERED_SINGLE_ROW: 0.95}, REORDERED),
     ({PLAIN: 2.0, REORDERED: 1.0, REORDERED_SINGLE_ROW: 0.5}, REORDERED_SINGLE_ROW), ({PLAIN: 1.0}, PLAIN)],
)  # fmt: skip
def test_a_kept_reordered_weight_gives_way_only_to_a_clearly_faster_kernel(monkeypatch, timings, expected):
    """Timings of kernels this close flip between processes: another kernel replaces the reordered weight only where
    it measured `SWITCH_MARGIN` faster, so that every process makes the same choice."""
    weight = torch.zeros(64, 32)
    monkeypatch.setitem(ReorderTimings.products, (64, 32, torch.float32, 2, 8), timings)
    assert ReorderTimings.kernel(weight, 5, threads=2) == expected


def test_reordered_copies_are_kept_checked_and_freed():
    """A kept copy is reused while the weight's bytes are unchanged, replaced when they change by any route (here
    `.data`, which bumps no version counter), made ahead by `build`, freed by `clear` and with its model."""
    model = ElmoModel(tiny_config()).eval()
    cell = model.bilm.layers[0].forward_cell
    recurrent_weights = [linear.weight for linear in cpu_kernels.recurrent_linears(model)]
    weights = 2 * sum(weight.nbytes for weight in recurrent_weights)
    ReorderedWeights.build(model)
    assert ReorderedWeights.memory_bytes(model) == weights
    first = ReorderedWeights.get(cell.hidden_to_gates)
    assert ReorderedWeights.get(cell.hidden_to_gates) is first
    cell.hidden_to_gates.weight.data[0, 0] += 1
    second = ReorderedWeights.get(cell.hidden_to_gates)
    assert second is not first
    inputs = torch.randn(2, cell.hidden_to_gates.in_features)
    torch.testing.assert_close(
        cpu_kernels.onednn_linear(inputs, second, None, None), inputs @ cell.hidden_to_gates.weight.detach().T
    )
    ReorderedWeights.clear(model)
    assert ReorderedWeights.memory_bytes(model) == 0
    ReorderedWeights.build(model)
    kept = len(ReorderedWeights._kept)
    del model, cell
    gc.collect()
    assert len(ReorderedWeights._kept) == kept - len(recurrent_weights)



@pytest.fixture
def fresh_thread_choices(monkeypatch, tmp_path):
    """StepThreads with no choices or checks kept from earlier tests, and torch's thread count restored after. The
    paced steps below have no threads that spin after them, so no step waits for spinning to end."""
    for table in ("choices", "timings", "same_bits"):
        monkeypatch.setattr(cpu_kernels.StepThreads, table, {})
    monkeypatch.setenv("ELMO_HF_CACHE", str(tmp_path / "cache"))  # no checks kept by earlier tests
    monkeypatch.setattr(cpu_kernels.KnownThreadBits, "_known", None)
    monkeypatch.setattr(cpu_kernels.StepThreads, "SPIN_SECONDS", 0.0)
    monkeypatch.setattr(cpu_kernels, "cores_free", lambda: None)  # the tests' own machine may be busy or not
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def paced_step(seconds_by_threads: dict[int, float]):
    """A step whose duration depends only on torch's thread count (as on a busy machine), returning its input."""

    def step(value: torch.Tensor) -> torch.Tensor:
        time.sleep(seconds_by_threads[1 if torch.get_num_threads() == 1 else 2])
        return value + 1

    return step


@pytest.mark.parametrize("one_thread_faster", [True, False])
@pytest.mark.parametrize("steps_per_call", [200, 1])
def test_step_threads_settle_on_the_faster_count_and_restore_torchs(
    fresh_thread_choices, one_thread_faster, steps_per_call
):
    """Within a call (a recurrence's time steps) and across calls of one step each (a sentence's chunk of words)."""
    torch.set_num_threads(2)
    fast, slow = 2e-4, 2e-3
    step = paced_step({1: fast, 2: slow} if one_thread_faster else {1: slow, 2: fast})
    state = torch.ones(1)
    counts = []
    for _ in range(200 // steps_per_call):
        with cpu_kernels.StepThreads() as threads:
            for _ in range(steps_per_call):
                state = threads.run("paced", 1, step, state, state=state)
                counts.append(torch.get_num_threads())
        assert torch.get_num_threads() == 2
    assert state.item() == 201
    settled = counts[-100:]
    expected = 1 if one_thread_faster else 2
    # After the first tries, the slower count runs only during the (ever rarer) tries: one here at most, of
    # TRIAL_STEPS timed steps and the untimed first one.
    assert settled.count(expected) >= 100 - (cpu_kernels.StepThreads.TRIAL_STEPS + 1), counts


def test_step_threads_keep_torchs_count_where_one_thread_gives_other_bits(fresh_thread_choices):
    torch.set_num_threads(2)

    counts = []

    def step(value: torch.Tensor) -> torch.Tensor:  # one thread 10x faster, but rounding otherwise
        counts.append(torch.get_num_threads())
        time.sleep(2e-4 if torch.get_num_threads() == 1 else 2e-3)
        return value + (1 if torch.get_num_threads() == 1 else 1 + 1e-6)

    with cpu_kernels.StepThreads() as threads:
        state = torch.ones(1)
        for _ in range(40):
            state = threads.run("other bits", 1, step, state, state=state)
    # The first try of one thread compared one step run with both counts, and found other bits.
    assert counts.count(1) == 1 and counts[counts.index(1) + 1] == 2 and len(counts) == 41, counts
    assert cpu_kernels.StepThreads.same_bits == {("other bits", torch.float32, 1, 2): False}


def test_step_threads_check_bits_only_on_a_state_that_is_not_zero(fresh_thread_choices):
    torch.set_num_threads(2)
    cpu_kernels.StepThreads.choices[2] = [1, 8, 8]  # one thread chosen: a kind of step is checked before it uses it
    step = paced_step({1: 0, 2: 0})
    with cpu_kernels.StepThreads() as threads:
        threads.run("zeros", 1, step, torch.zeros(1), state=torch.zeros(1))
        assert cpu_kernels.StepThreads.same_bits == {}
        threads.run("zeros", 1, step, torch.ones(1), state=torch.ones(1))
    assert cpu_kernels.StepThreads.same_bits == {("zeros", torch.float32, 1, 2): True}


def test_step_threads_restore_torchs_count_when_a_step_fails(fresh_thread_choices):
    torch.set_num_threads(2)
    cpu_kernels.StepThreads.same_bits[("failing", torch.float32, 1, 2)] = True
    cpu_kernels.StepThreads.choices[2] = [1, 8, 8]

    def step(value):
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError), cpu_kernels.StepThreads() as threads:
        threads.run("failing", 1, step, torch.ones(1), state=torch.ones(1))
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_thread_count_of_a_step_never_changes_the_result(fresh_thread_choices, tokenizer, monkeypatch, dtype):
    """The CPU token layer and recurrence with their steps on one thread, on torch's count and switching between
    them, give the bits of a run with a fixed count, on a published architecture's cell sizes, odd row counts and
    chunks of words."""
    if dtype == torch.bfloat16 and not cpu_kernels.bfloat16_supported():
        dtype = torch.float32
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(lstm_dim=1024, projection_dim=128, filters=[[1, 16], [2, 16]])).to(dtype).eval()
    monkeypatch.setattr(model.token_encoder, "chunk_size", 5)
    batch = encode(tokenizer, SENTENCES[:7])
    expected = {}
    for threads in (1, 2, 4):
        torch.set_num_threads(threads)
        cpu_kernels.StepThreads.same_bits.clear()
        with torch.no_grad():
            expected[threads] = model(**batch).last_hidden_state
    assert torch.equal(expected[1], expected[2]) and torch.equal(expected[1], expected[4])
    torch.set_num_threads(2)
    monkeypatch.setattr(cpu_kernels.StepThreads, "FIRST_TRY", 1)
    monkeypatch.setattr(cpu_kernels.StepThreads, "LONGEST_INTERVAL", 2)
    cpu_kernels.StepThreads.choices[2] = [1, 1, 1]  # one thread first, tries of two every other step
    for _ in range(3):  # the counts alternate within every call
        with torch.no_grad():
            assert torch.equal(model(**batch).last_hidden_state, expected[2])
    checked = cpu_kernels.StepThreads.same_bits
    assert {name.split(" (")[0].split(", ")[0] for name, *_ in checked} == {
        "token layer of 50 characters", "input to gates", "step"
    }
    assert all(checked.values())


def test_sums_outside_the_kernels_steps_run_with_torchs_count(fresh_thread_choices, tokenizer, monkeypatch):
    """Within a forward, the kernels' steps may leave one thread for the cheap work between them; a reference cell
    (here under a hook) and the training kernel's input-to-gate products still run with torch's count, so that their
    bits never depend on the count the steps before them left (the first training call after an inference call once
    gave other bits than the second)."""
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).eval()
    batch = encode(tokenizer, SENTENCES)
    torch.set_num_threads(2)
    cpu_kernels.StepThreads.choices[2] = [1, 1024, 1024]  # every checked step on one thread
    steps, products = [], []
    with_count = cpu_kernels.StepThreads._with

    def recorded(self, threads, step, args):
        steps.append(threads)
        return with_count(self, threads, step, args)

    monkeypatch.setattr(cpu_kernels.StepThreads, "_with", recorded)
    top = model.bilm.layers[-1].forward_cell
    top.projection.register_forward_hook(lambda *args: products.append(("hooked", torch.get_num_threads())))
    linear = nn.functional.linear

    def input_to_gates(inputs, weight, *args):
        if weight.shape == top.input_to_gates.weight.shape and not args:
            products.append(("input to gates", torch.get_num_threads()))
        return linear(inputs, weight, *args)

    with torch.inference_mode():
        expected = model(**batch).last_hidden_state
        assert model(**batch).last_hidden_state.equal(expected)
    monkeypatch.setattr(nn.functional, "linear", input_to_gates)
    hooked = products.copy()
    trained = [model(**batch).last_hidden_state for _ in range(2)]
    assert 1 in steps and hooked and all(threads == 2 for _, threads in products)
    assert {name for name, _ in products} == {"hooked", "input to gates"}
    assert torch.equal(trained[0], trained[1])
    torch.testing.assert_close(trained[0], expected)


class PacedDirection(nn.Module):
    """A stand-in for a direction's cell: records the thread it ran on, torch's count there, the thread's autograd and
    inference modes and whether `StepThreads` runs it as one of two at once, then sleeps `seconds[at once]`."""

    def __init__(self, seconds: dict[bool, float], calls: list[dict]):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(2, 2))
        self.seconds, self.calls = seconds, calls

    def forward(self, inputs: torch.Tensor, batch, state) -> tuple[torch.Tensor, tuple]:
        at_once = cpu_kernels.StepThreads().at_once
        self.calls.append(dict(
            thread=threading.current_thread().name, threads=torch.get_num_threads(), at_once=at_once,
            grad=torch.is_grad_enabled(), inference=torch.is_inference_mode_enabled(),
        ))
        time.sleep(self.seconds[at_once])
        return inputs + 1, state


def run_directions(cells, batch_sizes: list[int] = (1, 1)) -> tuple:
    batch = types.SimpleNamespace(batch_sizes=list(batch_sizes))
    return cpu_kernels.directions_at_once(cells, (torch.zeros(1), torch.ones(1)), batch, ((), ()))


@pytest.fixture
def fresh_directions(fresh_thread_choices, monkeypatch):
    """`DirectionsAtOnce` with no choices kept from earlier tests, two torch threads, and a machine that looks busy
    (a kind of layer starts at once)."""
    for table in ("choices", "timings"):
        monkeypatch.setattr(cpu_kernels.DirectionsAtOnce, table, {})
    monkeypatch.setattr(cpu_kernels, "first_count", lambda most: 1)
    torch.set_num_threads(2)


def test_directions_at_once_run_in_two_threads_of_one_torch_thread_with_the_callers_modes(fresh_directions):
    calls = []
    cells = (PacedDirection({True: 0, False: 0}, calls), PacedDirection({True: 0, False: 0}, calls))
    for modes in (torch.no_grad(), torch.inference_mode(), torch.enable_grad()):
        calls.clear()
        with modes:
            forward, backward = run_directions(cells)  # a kind's first call runs at once
            expected_modes = {(torch.is_grad_enabled(), torch.is_inference_mode_enabled())}
        assert torch.equal(forward[0], torch.ones(1)) and torch.equal(backward[0], torch.full((1,), 2.0))
        caller = threading.current_thread().name
        assert sorted(call["thread"] == caller for call in calls) == [False, True]
        assert all(call["threads"] == 1 and call["at_once"] for call in calls)
        assert {(call["grad"], call["inference"]) for call in calls} == expected_modes
        assert torch.get_num_threads() == 2 and not cpu_kernels.StepThreads().at_once
        cpu_kernels.DirectionsAtOnce.choices.clear()


@pytest.mark.parametrize("at_once_faster", [True, False])
def test_directions_settle_on_the_faster_way(fresh_directions, monkeypatch, at_once_faster):
    """At once or in turn, by the seconds per step of a layer's calls; the slower way runs only in the ever rarer
    tries."""
    monkeypatch.setattr(cpu_kernels.DirectionsAtOnce, "FIRST_TRY", 2)
    monkeypatch.setattr(cpu_kernels.DirectionsAtOnce, "LONGEST_INTERVAL", 8)
    calls = []
    seconds = {True: 0.001, False: 0.004} if at_once_faster else {True: 0.02, False: 0.001}
    cells = (PacedDirection(seconds, calls), PacedDirection(seconds, calls))
    ways = []
    with torch.no_grad():
        for _ in range(40):
            calls.clear()
            run_directions(cells)
            ways.append(calls[0]["at_once"])
    settled = ways[-20:]
    assert settled.count(at_once_faster) >= 20 - 2 * cpu_kernels.DirectionsAtOnce.TRIAL_CALLS, ways


@pytest.mark.parametrize("busy", [True, False])
def test_a_kind_of_layer_starts_at_once_only_where_the_machine_looks_busy(fresh_directions, monkeypatch, busy):
    monkeypatch.setattr(cpu_kernels, "first_count", lambda most: 1 if busy else most)
    calls = []
    cells = (PacedDirection({True: 0, False: 0}, calls), PacedDirection({True: 0, False: 0}, calls))
    with torch.no_grad():
        run_directions(cells)
    assert [call["at_once"] for call in calls] == [busy, busy]


def test_directions_run_in_turn_with_one_torch_thread(fresh_directions):
    torch.set_num_threads(1)
    calls = []
    cells = (PacedDirection({True: 0, False: 0}, calls), PacedDirection({True: 0, False: 0}, calls))
    with torch.no_grad():
        run_directions(cells)
    assert [call["thread"] for call in calls] == [threading.current_thread().name] * 2
    assert not any(call["at_once"] for call in calls) and cpu_kernels.DirectionsAtOnce.choices == {}


def test_a_models_layers_run_their_directions_at_once_through_the_cpu_kernel(fresh_directions, tokenizer, monkeypatch):
    """In a model's forward, each layer's backward direction runs the CPU recurrence in the worker thread and the
    forward one in the caller's, each with one torch thread, and the result has the bits of one torch thread."""
    monkeypatch.setattr(cpu_kernels, "available_cores", lambda: 2)
    runs = []
    kernel = RECURRENCE_IMPLEMENTATIONS["cpu"]

    def recorded(*args):
        runs.append((threading.current_thread().name, torch.get_num_threads()))
        return kernel.function(*args)

    monkeypatch.setitem(RECURRENCE_IMPLEMENTATIONS, "cpu", Implementation(recorded, kernel.supports))
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).eval()
    batch = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        torch.set_num_threads(1)
        expected = model(**batch).last_hidden_state
        torch.set_num_threads(2)
        runs.clear()
        actual = model(**batch).last_hidden_state
    assert torch.equal(actual, expected)
    caller = threading.current_thread().name
    names = [name for name, _ in runs]
    assert names.count(caller) == 2 and sum(name.startswith("elmo-hf-direction") for name in names) == 2, runs
    assert {count for _, count in runs} == {1}


def directions_in_child(results) -> None:
    calls = []
    with torch.no_grad():
        run_directions((PacedDirection({True: 0, False: 0}, calls), PacedDirection({True: 0, False: 0}, calls)))
    results.put((sorted(call["thread"] for call in calls), cpu_kernels.DirectionsAtOnce._worker[0] == os.getpid()))


def test_a_forked_child_runs_directions_at_once_in_its_own_worker(fresh_directions):
    """A child forked after the parent ran layers at once (a data loader's worker, say) has no thread of the
    parent's worker: it starts its own (on the parent's, its backward direction would wait forever)."""
    with torch.no_grad():
        run_directions((PacedDirection({True: 0, False: 0}, []), PacedDirection({True: 0, False: 0}, [])))
    assert cpu_kernels.DirectionsAtOnce._worker[0] == os.getpid()
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=directions_in_child, args=(results,))
    child.start()
    threads, own_worker = results.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0 and own_worker
    assert threads[0] == "MainThread" and threads[1].startswith("elmo-hf-direction"), threads


def test_a_direction_that_fails_at_once_raises_after_both_ended(fresh_directions):
    ended = []

    class Failing(nn.Module):
        def __init__(self, seconds: float):
            super().__init__()
            self.weight, self.seconds = nn.Parameter(torch.zeros(2, 2)), seconds

        def forward(self, inputs, batch, state):
            time.sleep(self.seconds)
            ended.append(threading.current_thread().name)
            raise RuntimeError(f"direction {self.seconds}")

    caller = threading.current_thread().name
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="direction 0.0$"):  # the forward direction's error, raised here
            run_directions((Failing(0.0), Failing(0.05)))
    assert ended[0] == caller and len(ended) == 2  # the backward one had ended too
    with torch.no_grad(), pytest.raises(RuntimeError, match="direction 0.05"):
        run_directions((PacedDirection({True: 0, False: 0}, []), Failing(0.05)))
    assert torch.get_num_threads() == 2 and not cpu_kernels.StepThreads().at_once


def test_a_direction_at_once_runs_one_thread_only_where_it_gives_torchs_bits(fresh_thread_choices):
    """`StepThreads.one_of_two`: each step with one thread once a check found the same bits as torch's count, with
    torch's count where they differ; the thread's count comes back after."""
    torch.set_num_threads(2)
    counts = []

    def step(value: torch.Tensor) -> torch.Tensor:
        counts.append(torch.get_num_threads())
        return value + (1 if torch.get_num_threads() == 1 or value.item() < 5 else 1 + 1e-6)

    with cpu_kernels.StepThreads.one_of_two(2), cpu_kernels.StepThreads() as threads:
        assert torch.get_num_threads() == 1
        for name in ("same bits", "other bits"):
            counts.clear()
            start = torch.ones(1) if name == "same bits" else torch.full((1,), 9.0)
            state = start
            for _ in range(3):
                state = threads.run(name, 1, step, state, state=state)
            assert counts == ([1, 2, 1, 1] if name == "same bits" else [1, 2, 2, 2]), counts
    assert cpu_kernels.StepThreads.same_bits == {
        ("same bits", torch.float32, 1, 2): True, ("other bits", torch.float32, 1, 2): False
    }
    assert torch.get_num_threads() == 2


def counting_step(counts: list[int]):
    """A step returning its input plus one that records the thread count of each of its runs."""

    def step(value: torch.Tensor) -> torch.Tensor:
        counts.append(torch.get_num_threads())
        return value + 1

    return step


def forget_this_process():
    """What a fresh process knows: no checks in memory, the file not read yet."""
    cpu_kernels.StepThreads.same_bits.clear()
    cpu_kernels.KnownThreadBits._known = None


def test_thread_checks_are_kept_for_the_next_process(fresh_thread_choices):
    """A check made by one process (one thread, then torch's count) is written to the cache file; the next process
    reads it and runs the step with one thread at once, without the run with torch's count."""
    torch.set_num_threads(2)
    cpu_kernels.StepThreads.choices[2] = [1, 8, 8]
    counts = []
    with cpu_kernels.StepThreads() as threads:
        threads.run("kept", 1, counting_step(counts), torch.ones(1), state=torch.ones(1))
    assert counts == [1, 2]
    path = cpu_kernels.KnownThreadBits.path()
    assert json.loads(path.read_text()) == {"kept|torch.float32|1|2": True}
    forget_this_process()
    counts.clear()
    with cpu_kernels.StepThreads() as threads:
        threads.run("kept", 1, counting_step(counts), torch.ones(1), state=torch.ones(1))
    assert counts == [1]
    assert cpu_kernels.StepThreads.same_bits == {("kept", torch.float32, 1, 2): True}


def test_a_killed_writers_temporary_file_is_removed_by_a_later_write(fresh_thread_choices):
    """A process killed between writing the record's temporary file and renaming it leaves the temporary file; the
    next write removes it once it is older than any write could take, and leaves a fresh one (another process's,
    being written now) alone."""
    torch.set_num_threads(2)
    cpu_kernels.StepThreads.choices[2] = [1, 8, 8]
    directory = cpu_kernels.KnownThreadBits.path().parent
    directory.mkdir(parents=True)
    orphan, fresh = directory / "thread-bits-killed.tmp", directory / "thread-bits-writing.tmp"
    for temporary in (orphan, fresh):
        temporary.write_text("{")
    old = time.time() - cpu_kernels.ORPHAN_SECONDS - 60
    os.utime(orphan, (old, old))
    with cpu_kernels.StepThreads() as threads:
        threads.run("orphans", 1, counting_step([]), torch.ones(1), state=torch.ones(1))
    assert sorted(file.name for file in directory.iterdir()) == sorted(
        [cpu_kernels.KnownThreadBits.path().name, fresh.name]
    )


def test_thread_checks_survive_a_damaged_or_unwritable_cache(fresh_thread_choices, monkeypatch, tmp_path):
    """A damaged file is read as empty and written anew; where the directory cannot be made (here its parent is a
    file) or `ELMO_HF_CACHE` is empty, the check stays in the process and nothing fails or is left behind."""
    torch.set_num_threads(2)
    cpu_kernels.StepThreads.choices[2] = [1, 8, 8]
    path = cpu_kernels.KnownThreadBits.path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with cpu_kernels.StepThreads() as threads:
        threads.run("damaged", 1, counting_step([]), torch.ones(1), state=torch.ones(1))
    assert json.loads(path.read_text()) == {"damaged|torch.float32|1|2": True}
    assert [file.name for file in path.parent.iterdir()] == [path.name]

    (tmp_path / "a file").write_text("")
    for directory in (str(tmp_path / "a file" / "cache"), ""):
        monkeypatch.setenv("ELMO_HF_CACHE", directory)
        forget_this_process()
        counts = []
        with cpu_kernels.StepThreads() as threads:
            for _ in range(2):
                threads.run("unwritable", 1, counting_step(counts), torch.ones(1), state=torch.ones(1))
        assert counts == [1, 2, 1]  # checked once, then one thread
    assert cpu_kernels.KnownThreadBits.path() is None
    assert (tmp_path / "a file").read_text() == ""


def test_the_cache_file_is_named_after_what_picks_the_kernels(monkeypatch):
    """Another limit on oneDNN's instruction set or another default math mode (or torch, or CPU) reads another file:
    the checks made under one do not hold for the kernels picked under another."""
    fingerprint = cpu_kernels.machine_fingerprint.__wrapped__
    before = fingerprint()
    for name, value in (("ONEDNN_MAX_CPU_ISA", "AVX2"), ("ONEDNN_DEFAULT_FPMATH_MODE", "BF16")):
        monkeypatch.setenv(name, value)
        assert fingerprint() != before
        monkeypatch.delenv(name)
        assert fingerprint() == before


def test_a_fresh_process_runs_no_check_an_earlier_one_made(tmp_path):
    """Two real processes with the same cache: the first checks its kinds of step with one thread in use, the second
    (the same model and sentences) runs none of those checks."""
    program = """
import torch
from conftest import MIXED_SENTENCES, encode, tiny_config
from elmo_hf import ElmoModel, ElmoTokenizer, cpu_kernels
torch.set_num_threads(2)
cpu_kernels.StepThreads.choices[2] = [1, 8, 8]
cpu_kernels.cores_free = lambda: None
checks = []
put = cpu_kernels.KnownThreadBits.put
cpu_kernels.KnownThreadBits.put = lambda key, same: (checks.append(key), put(key, same))
torch.manual_seed(0)
model = ElmoModel(tiny_config()).eval()
with torch.no_grad():
    model(**encode(ElmoTokenizer(), MIXED_SENTENCES))
print(len(checks), len(cpu_kernels.StepThreads.same_bits))
"""
    environment = {**os.environ, "ELMO_HF_CACHE": str(tmp_path), "PYTHONPATH": str(Path(__file__).parent)}
    outputs = [
        subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, env=environment)
        .stdout.split()
        for _ in range(2)
    ]
    first_checks, first_known = map(int, outputs[0])
    second_checks, second_known = map(int, outputs[1])
    assert first_checks > 0 and first_checks == first_known
    assert (second_checks, second_known) == (0, first_known)


def test_models_of_other_sizes_are_other_kinds_of_step(fresh_thread_choices, tokenizer):
    """A check of one model's steps is not taken for another's with other weight shapes in the same process: each
    kind of step is named with its weights' shapes, so both models' steps are checked."""
    torch.set_num_threads(2)
    cpu_kernels.StepThreads.choices[2] = [1, 8, 8]  # one thread in use: a kind of step is checked before it uses it
    batch = encode(tokenizer, SENTENCES[:2])
    for lstm_dim in (64, 96):
        torch.manual_seed(0)
        model = ElmoModel(ElmoConfig(lstm_dim=lstm_dim, projection_dim=32, filters=[[1, 8], [2, 8]])).eval()
        with torch.no_grad():
            model(**batch)
    steps = {name for name, *_ in cpu_kernels.StepThreads.same_bits if name.startswith("step")}
    assert steps == {"step (256x32, 32x64)", "step (384x32, 32x96)"}


@pytest.mark.parametrize(("load", "free", "expected"), [(0.2, 2, 2), (5.0, 2, 1), (None, None, 2), (0.2, 1, 1)])
def test_a_process_starts_from_one_thread_where_the_machine_looks_busy(monkeypatch, load, free, expected):
    """The first count before any timing: one thread at a load average of at least the cores available or with no
    core free for a second thread now, torch's count otherwise and where the system tells neither."""

    def load_average():
        if load is None:
            raise OSError("no load average")
        return (load, load, load)

    monkeypatch.setattr(cpu_kernels.os, "getloadavg", load_average)
    monkeypatch.setattr(cpu_kernels.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(cpu_kernels, "cores_free", lambda: free)
    assert cpu_kernels.first_count(2) == expected


@pytest.mark.parametrize(
    ("loadavg", "affinity", "own", "expected"),
    [("0.50 0.40 0.30 1/120 999", {0, 1}, 1, 2), ("3.10 2.90 2.00 3/131 999", {0, 1}, 1, 0),
     ("1.00 1.00 1.00 2/99 9", {0, 1}, 1, 1), ("1.00 1.00 1.00 2/99 9", {0, 1}, 2, 2),
     ("1.00 1.00 1.00 3/99 9", {0, 1}, 2, 1), ("0.50 0.40 0.30 1/120 999", {0}, 1, None),
     ("garbled", {0, 1}, 1, None)],
)  # fmt: skip
def test_cores_free_reads_the_run_queue(monkeypatch, tmp_path, loadavg, affinity, own, expected):
    """The cores no other process's thread wants now: the cores less the runnable threads that are not this
    process's (its own, a spinning worker included, are no load); unknown where this process may run on only some
    cores or the run queue cannot be read."""
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/loadavg":
            (tmp_path / "loadavg").write_text(loadavg)
            return real_open(tmp_path / "loadavg", *args, **kwargs)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr(cpu_kernels.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_kernels.os, "sched_getaffinity", lambda pid: affinity, raising=False)
    monkeypatch.setattr(cpu_kernels, "own_runnable_threads", lambda: own)
    assert cpu_kernels.cores_free() == expected


def test_own_runnable_threads_reads_each_threads_state(tmp_path):
    """Threads in state R count (the state follows the last parenthesis: a name may hold spaces and parentheses);
    a thread that ended while being read is skipped; at least one (the caller), and one where nothing can be read."""
    for tid, stat in [("11", "11 (python) R 1 11"), ("12", "12 (omp worker (2)) R 1 11"), ("13", "13 (a b) S 1 11"),
                      ("14", None)]:  # fmt: skip
        (tmp_path / tid).mkdir()
        if stat is not None:
            (tmp_path / tid / "stat").write_text(stat)
    assert cpu_kernels.own_runnable_threads(tmp_path) == 2
    (tmp_path / "11" / "stat").write_text("11 (python) S 1 11")
    (tmp_path / "12" / "stat").write_text("12 (omp worker (2)) S 1 11")
    assert cpu_kernels.own_runnable_threads(tmp_path) == 1
    assert cpu_kernels.own_runnable_threads(tmp_path / "missing") == 1
    assert cpu_kernels.own_runnable_threads() >= 1  # this process's own, read from the system


def test_step_threads_put_off_tries_of_two_threads_while_no_core_is_free(fresh_thread_choices, monkeypatch):
    """With one thread in use and the run queue full, no step runs with two threads (they would wait for a core),
    however much faster they are; once a core is free, the next due try runs and two threads are kept."""
    torch.set_num_threads(2)
    cpu_kernels.StepThreads.choices[2] = [1, 8, 8]
    cpu_kernels.StepThreads.same_bits[("paced", torch.float32, 1, 2)] = True
    free = [0]
    monkeypatch.setattr(cpu_kernels, "cores_free", lambda: free[0])
    step = paced_step({1: 2e-3, 2: 1e-4})
    counts = []
    with cpu_kernels.StepThreads() as threads:
        for index in range(80):
            if index == 40:
                free[0] = 2
            threads.run("paced", 1, step, torch.ones(1), state=torch.ones(1))
            counts.append(torch.get_num_threads())
    assert set(counts[:40]) == {1}, counts
    assert cpu_kernels.StepThreads.choices[2][0] == 2
    assert counts[-20:].count(2) >= 20 - (cpu_kernels.StepThreads.TRIAL_STEPS + 1), counts  # a try of one at most


def test_run_rows_pads_to_a_multiple_of_rows_and_drops_the_padding(fresh_thread_choices):
    """A step of rows runs on a multiple of `ROW_MULTIPLE` rows (zeros appended), so its bits are checked per
    multiple, not per count; its result is the step's on the padded rows, less the padding's."""
    torch.set_num_threads(2)
    cpu_kernels.StepThreads.choices[2] = [1, 8, 8]  # one thread in use: a kind of step is checked before it uses it
    linear = torch.nn.Linear(16, 32)
    seen = []

    def step(rows: torch.Tensor) -> torch.Tensor:
        seen.append(rows.shape[0])
        return linear(rows)

    with torch.no_grad(), cpu_kernels.StepThreads() as threads:
        for count in (3, 5, 8, 9):
            rows = torch.randn(count, 16)
            padded = torch.cat([rows, rows.new_zeros(-count % cpu_kernels.ROW_MULTIPLE, 16)])
            result = threads.run_rows("rows", step, rows)
            assert torch.equal(result, linear(padded)[:count])
            torch.testing.assert_close(result, linear(rows))
    assert all(rows % cpu_kernels.ROW_MULTIPLE == 0 for rows in seen), seen
    assert sorted(key[2] for key in cpu_kernels.StepThreads.same_bits) == [8, 16]


def test_a_call_measures_every_thread_count_its_steps_may_run_with_before_them(monkeypatch):
    """Each count a step may run with (torch's, and one thread where torch's is more) is measured as the call begins,
    so that no later call, a try of one thread or of two directions at once, measures inside its timed steps; and
    two directions measuring the same weight shape at once measure each bucket once."""
    measured = []
    measure = ReorderTimings._measure.__func__

    def counted(cls, weight, reordered, blocked, rows):
        measured.append((rows, torch.get_num_threads()))
        time.sleep(0.05)  # long enough for the other thread to ask for the same buckets meanwhile
        return measure(cls, weight, reordered, blocked, rows)

    monkeypatch.setattr(ReorderTimings, "_measure", classmethod(counted))
    monkeypatch.setattr(ReorderTimings, "products", {})
    linear = nn.Linear(16, 64, bias=False)
    with torch.inference_mode(), cpu_kernels.torch_threads(2):
        recurrent = RecurrentLinear(linear, row_counts=[3, 3, 1])
        assert sorted(measured) == [(1, 1), (1, 2), (4, 1), (4, 2)]
        assert set(recurrent.kernels) == {(3, 2), (3, 1), (1, 2), (1, 1)}
        for threads in (1, 2):
            with cpu_kernels.torch_threads(threads):
                inputs = torch.randn(3, 16)
                assert torch.equal(recurrent(inputs), cpu_kernels.recurrent_product(inputs, linear.weight, None))
        measured.clear()
        weight = torch.randn(64, 24)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: ReorderTimings.measure(weight, [2, 5], threads=1), range(2)))
        assert sorted(measured) == [(2, 1), (8, 1)]
    ReorderedWeights.clear()
