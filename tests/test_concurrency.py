"""The model used concurrently, as a web server or a data pipeline uses it: threads sharing a model (the CPU kernels,
reordered weights and `DirectionsAtOnce` engaged), two models at once, a failing forward beside others, training
beside inference, a forked child. Every result must have the bits of the same call made alone; deadlocks fail on
timeouts instead of hanging."""

import copy
import os
import select
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import tiny_config
from torch._subclasses.fake_tensor import FakeTensorMode

from elmo_hf import ElmoForTokenClassification, ElmoModel, ElmoTokenizer, cpu_kernels, modeling_elmo
from elmo_hf.pipeline_elmo import ElmoFeatureExtractionPipeline, ElmoTokenClassificationPipeline
from transformers import pipeline

TIMEOUT = 120  # seconds: far above a run's time, so that only a deadlock reaches it
THREADS = 2  # torch's count in every thread of these tests


def mid_config(**overrides):
    """Large enough that oneDNN's products and reordered weights matter, small enough for a test."""
    return tiny_config(
        char_embedding_dim=16, filters=[[1, 32], [2, 32], [3, 64]], num_highway_layers=2, projection_dim=64,
        lstm_dim=256, **overrides,
    )  # fmt: skip


def word_ids(batch: int, length: int, seed: int) -> torch.Tensor:
    """Random words, rows of random lengths (at least one word)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 260, (batch, length, 50), generator=generator)
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    ids[torch.arange(length) >= lengths[:, None]] = 0
    return ids


CASES = [word_ids(batch, length, seed) for seed, (batch, length) in enumerate([(1, 5), (3, 11), (8, 7), (2, 16)])]


def in_threads(*calls, workers: int = 4) -> list:
    """Runs the calls in threads of `THREADS` torch threads each, and returns their results (the exception of a
    call that raised, re-raised). Every thread sets and reads its count before any call starts: a thread's first
    read takes torch's process-wide count, which a forward in another thread may have lent to its steps
    (docs/guarantees.md)."""
    ready = threading.Barrier(workers, timeout=TIMEOUT)

    def start() -> None:
        torch.set_num_threads(THREADS)
        torch.get_num_threads()
        ready.wait()

    with ThreadPoolExecutor(workers, initializer=start) as executor:
        submitted = [executor.submit(call) for call in calls]
        return [future.result(timeout=TIMEOUT) for future in submitted]


@pytest.fixture
def kernels(monkeypatch):
    """The CPU kernels as on a busy machine with two cores: every biLSTM layer runs its directions at once, in the
    worker thread (`DirectionsAtOnce`, no tries in turn); torch's thread count restored after."""
    for table in ("choices", "timings"):
        monkeypatch.setattr(cpu_kernels.DirectionsAtOnce, table, {})
    monkeypatch.setattr(cpu_kernels.DirectionsAtOnce, "FIRST_TRY", 10**6)
    monkeypatch.setattr(cpu_kernels, "first_count", lambda most: 1)
    monkeypatch.setattr(cpu_kernels, "available_cores", lambda: 2)
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(threads)


def mid_model(seed: int = 0) -> ElmoModel:
    torch.manual_seed(seed)
    return ElmoModel(mid_config()).eval()


def alone(model, key: str = "last_hidden_state") -> list[torch.Tensor]:
    with torch.inference_mode():
        return [model(ids)[key] for ids in CASES]


def repeated_calls(
    model, expected: list[torch.Tensor], start: int, mode=torch.inference_mode, key="last_hidden_state"
):
    """A thread's calls of every case in turn (from `start`): whether each had the bits of the call alone, and the
    thread's torch count after."""
    same = []
    with mode():
        for index in range(start, start + 2 * len(CASES)):
            case = index % len(CASES)
            same.append(torch.equal(model(CASES[case])[key], expected[case]))
    return all(same), torch.get_num_threads()


def test_the_cpu_kernels_and_directions_at_once_engage(kernels, monkeypatch):
    """What the tests below exercise: the dispatcher takes the CPU kernels and runs the directions at once."""
    model, taken = mid_model(), set()
    choose = modeling_elmo.choose_implementation

    def recording(*args):
        function = choose(*args)
        taken.add(function.__name__)
        return function

    monkeypatch.setattr(modeling_elmo, "choose_implementation", recording)
    with torch.inference_mode():
        model(CASES[1])
    assert {"encode_words", "lstm_with_projection", "directions_at_once"} <= taken
    assert all(choice[0] for choice in cpu_kernels.DirectionsAtOnce.choices.values())
    assert cpu_kernels.DirectionsAtOnce._worker is not None


def test_first_forwards_make_mkl_vector_math_ready_before_anything_calls_it(kernels, monkeypatch):
    """Two threads' first forwards at once, each model running its directions at once (the shared worker thread
    taking the backward ones): before any of the models' own calls of a function of MKL's vector math
    (`cpu_kernels.VectorMath`: two threads calling one for the first time at once can get a kernel of another
    accuracy, as a fresh process once did here), one thread has called each of its functions once on one float32 and
    one float64 element; nothing does again."""
    monkeypatch.setattr(cpu_kernels.VectorMath, "_ready", False)
    calls = []
    for name in cpu_kernels.VectorMath.FUNCTIONS:

        def recording(tensor, *args, name=name, original=getattr(torch, name), **kwargs):
            calls.append((name, tensor.dtype, tensor.numel(), threading.current_thread().name))
            return original(tensor, *args, **kwargs)

        monkeypatch.setattr(torch, name, recording)
    models = [mid_model(0), mid_model(1)]

    def first_forward(model) -> None:
        with torch.inference_mode():
            model(CASES[2])

    in_threads(*[lambda model=model: first_forward(model) for model in models], workers=2)
    resolving = calls[0][3]
    functions = cpu_kernels.VectorMath.FUNCTIONS
    ready = [(name, dtype, 1, resolving) for dtype in (torch.float32, torch.float64) for name in functions]
    assert calls[: len(ready)] == ready
    models_calls = calls[len(ready) :]
    assert {(name, dtype) for name, dtype, *_ in models_calls} == {("tanh", torch.float32)}  # the LSTM steps'
    assert {thread for *_, thread in models_calls} > {resolving}  # the other thread and the workers came after
    assert any(thread.startswith("elmo-hf-direction") for *_, thread in models_calls)
    assert cpu_kernels.VectorMath._ready and not cpu_kernels.VectorMath._lock.locked()


def test_vector_math_is_ready_only_after_calls_that_computed(monkeypatch):
    """Under fake tensors the calls compute nothing: `resolve` leaves the vector math for a later call. A default
    device of another kind (a `torch.device("meta")` block) does not stop it: the calls name the CPU."""
    monkeypatch.setattr(cpu_kernels.VectorMath, "_ready", False)
    with FakeTensorMode():
        cpu_kernels.VectorMath.resolve()
    assert not cpu_kernels.VectorMath._ready
    with torch.device("meta"):
        cpu_kernels.VectorMath.resolve()
    assert cpu_kernels.VectorMath._ready


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad])
def test_threads_sharing_a_model_get_the_bits_of_each_call_alone(kernels, mode):
    model = mid_model()
    cpu_kernels.ReorderedWeights.build(model)  # kept copies shared by every thread
    expected = alone(model)
    results = in_threads(*[lambda start=start: repeated_calls(model, expected, start, mode) for start in range(4)])
    assert results == [(True, THREADS)] * 4
    assert torch.get_num_threads() == THREADS
    assert not cpu_kernels.StepThreads._checking.locked() and not cpu_kernels.DirectionsAtOnce._lock.locked()


def test_a_thread_changing_its_count_beside_a_forward(kernels):
    """One thread forwards with two torch threads while another switches between one and two: each call has the
    bits of the same call alone with its thread's count, and the first thread's count stays its own."""
    model = mid_model()
    expected = {threads: None for threads in (1, THREADS)}
    for threads in expected:
        torch.set_num_threads(threads)
        expected[threads] = alone(model)
    torch.set_num_threads(THREADS)

    def switching():
        same = []
        with torch.inference_mode():
            for index in range(2 * len(CASES)):
                threads = 1 + index % 2
                torch.set_num_threads(threads)
                case = index % len(CASES)
                same.append(torch.equal(model(CASES[case]).last_hidden_state, expected[threads][case]))
        return all(same), torch.get_num_threads()

    steady = in_threads(lambda: repeated_calls(model, expected[THREADS], 0), switching, workers=2)
    assert steady == [(True, THREADS), (True, THREADS)]


def test_two_models_in_two_threads(kernels):
    base = mid_model(1)
    torch.manual_seed(2)
    tagger = ElmoForTokenClassification(tiny_config(num_labels=3)).eval()
    expected_base, expected_tagger = alone(base), alone(tagger, "logits")
    results = in_threads(
        lambda: repeated_calls(base, expected_base, 0),
        lambda: repeated_calls(tagger, expected_tagger, 1, key="logits"),
        lambda: repeated_calls(base, expected_base, 2, torch.no_grad),
        lambda: repeated_calls(tagger, expected_tagger, 3, torch.no_grad, key="logits"),
    )
    assert results == [(True, THREADS)] * 4


def test_pipelines_shared_by_threads():
    """The feature-extraction and token-classification pipelines called from several threads at once give what each
    call gives alone."""
    torch.manual_seed(0)
    tokenizer = ElmoTokenizer()
    features = pipeline(
        "feature-extraction", model=ElmoModel(tiny_config()).eval(), tokenizer=tokenizer,
        pipeline_class=ElmoFeatureExtractionPipeline,
    )  # fmt: skip
    tagger = ElmoForTokenClassification(tiny_config(id2label={0: "O", 1: "B-X", 2: "I-X"})).eval()
    ner = pipeline(
        "token-classification", model=tagger, tokenizer=tokenizer, pipeline_class=ElmoTokenClassificationPipeline
    )
    calls = [
        lambda: features("the bank of the river"),
        lambda: features(["the", "bank", "of"], is_split_into_words=True),
        lambda: features(["a b c", "d", ""], batch_size=3),
        lambda: ner("Angela Merkel visited Paris ."),
        lambda: ner(["p q", "r s t u"], batch_size=2, aggregation_strategy="first"),
    ]
    expected = [call() for call in calls]

    def calls_in_turn(start: int) -> bool:
        return all(calls[index % len(calls)]() == expected[index % len(calls)] for index in range(start, start + 10))

    assert in_threads(*[lambda start=start: calls_in_turn(start) for start in range(4)]) == [True] * 4


def test_a_failing_forward_leaves_the_others_and_later_calls_intact(kernels, monkeypatch):
    """A forward that raises in its steps (of either direction: in the calling thread or in the shared worker) while
    other threads forward leaves no lock held, no thread count changed and no kept state broken."""
    model = mid_model()
    expected = alone(model)
    failing = torch.ones(3, 6, 50, dtype=torch.long)  # steps of 3 equal rows, which no other batch has
    update = cpu_kernels.lstm_cell_update

    def failing_update(gates, cell, cell_clip):
        if gates.shape[0] == 3 and torch.equal(gates[0], gates[1]) and torch.equal(gates[1], gates[2]):
            raise RuntimeError("injected failure")
        return update(gates, cell, cell_clip)

    monkeypatch.setattr(cpu_kernels, "lstm_cell_update", failing_update)
    others = [case for case in CASES if case.shape[0] != 3]
    expected_others = [expected[index] for index, case in enumerate(CASES) if case.shape[0] != 3]

    def failing_calls():
        raised = 0
        for _ in range(6):
            try:
                with torch.no_grad():
                    model(failing)
            except RuntimeError as error:
                raised += "injected failure" in str(error)
        return raised, torch.get_num_threads()

    def good_calls():
        with torch.inference_mode():
            same = [torch.equal(model(case).last_hidden_state, value) for case, value in zip(others, expected_others)]
        return all(same), torch.get_num_threads()

    results = in_threads(failing_calls, good_calls, failing_calls, good_calls)
    assert results == [(6, THREADS), (True, THREADS)] * 2
    assert not cpu_kernels.StepThreads._checking.locked() and not cpu_kernels.DirectionsAtOnce._lock.locked()
    monkeypatch.setattr(cpu_kernels, "lstm_cell_update", update)
    assert [torch.equal(a, b) for a, b in zip(alone(model), expected)] == [True] * len(CASES)
    assert torch.get_num_threads() == THREADS


def test_training_beside_inference_on_a_copy(kernels):
    """A training loop in one thread (autograd: the reference and training kernels) and inference on a deep copy in
    another (the CPU kernels): the copy's results keep their bits while the original's weights change."""
    torch.manual_seed(3)
    trained = ElmoForTokenClassification(mid_config(num_labels=3)).train()
    served = copy.deepcopy(trained).eval()
    before = [parameter.detach().clone() for parameter in trained.parameters()]
    expected = alone(served, "logits")
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.5)

    def train():
        for step in range(4):
            ids = CASES[step % len(CASES)]
            words = ids.ne(0).any(-1)  # padding (all-zero rows) takes no label
            loss = trained(ids, labels=torch.randint(0, 3, ids.shape[:2]).masked_fill(~words, -100)).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return torch.get_num_threads()

    results = in_threads(train, lambda: repeated_calls(served, expected, 0, key="logits"), workers=2)
    assert results == [THREADS, (True, THREADS)]
    assert not all(torch.equal(a, b) for a, b in zip(before, trained.parameters()))
    assert [torch.equal(a, b) for a, b in zip(alone(served, "logits"), expected)] == [True] * len(CASES)


def test_a_forked_child_runs_directions_at_once_with_its_own_worker(kernels):
    """After forwards that started the worker thread of `DirectionsAtOnce`, a forked child (as a fork-started
    DataLoader worker or process pool is) runs its directions at once in a worker of its own (the parent's thread is
    not in the child), with the parent's bits. Forked from a thread that never ran a parallel region: GNU OpenMP hangs
    a child forked by a thread that did, with or without ELMo."""
    model = mid_model()
    expected = alone(model)
    parent_worker = cpu_kernels.DirectionsAtOnce._worker
    assert parent_worker is not None and parent_worker[0] == os.getpid()
    read, write = os.pipe()
    child = []

    def fork():
        pid = os.fork()
        if pid:
            child.append(pid)
            return
        try:
            torch.set_num_threads(THREADS)
            with torch.inference_mode():
                same = all(torch.equal(model(ids).last_hidden_state, value) for ids, value in zip(CASES, expected))
            own = cpu_kernels.DirectionsAtOnce._worker[0] == os.getpid()
            os.write(write, b"1" if same and own else b"0")
        finally:
            os._exit(0)

    forking = threading.Thread(target=fork)
    forking.start()
    forking.join()
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], TIMEOUT)
        answer = os.read(read, 1) if ready else b"timed out"
    finally:
        os.close(read)
        if child:
            if answer == b"timed out":
                os.kill(child[0], 9)
            os.waitpid(child[0], 0)
    assert answer == b"1"


def test_concurrent_tries_of_a_thread_count_end(monkeypatch):
    """Threads sharing a kind of step append to one trial of the other thread count; where two appends came before
    either thread compared, the trial holds more than `TRIAL_STEPS` times. The next step must still end the try (it
    compared for exactly `TRIAL_STEPS`, leaving every later step of the process a try of the other count)."""
    monkeypatch.setattr(cpu_kernels.StepThreads, "choices", {THREADS: [1, 8, 0]})  # one thread in use, a try due
    monkeypatch.setattr(cpu_kernels.DirectionsAtOnce, "choices", {})  # directions in turn: their steps decide
    monkeypatch.setattr(cpu_kernels.DirectionsAtOnce, "timings", {})
    monkeypatch.setattr(cpu_kernels, "first_count", lambda most: most)

    class OverfullTrials(dict):
        """Every kind of step found as the interleaved appends left it: a trial one past `TRIAL_STEPS`."""

        def setdefault(self, key, default=None):
            trials = cpu_kernels.StepThreads.TRIAL_STEPS + 1
            return super().setdefault(key, ([1.0] * cpu_kernels.StepThreads.RECENT_STEPS, [1.0] * trials))

    monkeypatch.setattr(cpu_kernels.StepThreads, "timings", OverfullTrials())
    monkeypatch.setattr(cpu_kernels.StepThreads, "SPIN_SECONDS", 0.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        model = mid_model()
        with torch.inference_mode():
            model(word_ids(1, 12, 0))
    finally:
        torch.set_num_threads(threads)
    # The try ended: the faster count kept, the next try scheduled (a try never ending leaves [1, 8, 0]).
    assert cpu_kernels.StepThreads.choices[THREADS] != [1, 8, 0]
    assert any(not trial for _, trial in cpu_kernels.StepThreads.timings.values())
