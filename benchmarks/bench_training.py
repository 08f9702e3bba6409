"""Training speed of a pretraining step: elmo-hf's `ElmoForPreTraining` against the same biLM built from
`torch.nn.LSTM(proj_size=...)`, in one run, with the fraction of the machine's measured matrix-product throughput.

Three builds, their steps interleaved (round r times step r of every build, so a busy machine slows all alike):
`elmo-hf` as it trains (the LSTM cells' fused autograd function of `training_kernels.py`), `elmo-hf reference`
(`elmo_implementation="eager"`: autograd through every step of the reference modules) and `nn.LSTM(proj_size)`.

    python benchmarks/bench_training.py [--architectures small ptb] [--batch-size 32] [--steps 3] [--threads 2]
        [--profile]

One step = forward, backward and an Adam update over a batch of Penn Treebank sentences (or synthetic ones when the
data is absent), full softmax over a 10,002-word vocabulary. Words/s counts real words (not `<S>`/`</S>`). The
`nn.LSTM` build has the same character CNN, softmax and residual connections, one `nn.LSTM` per direction and layer
over packed sequences, and no clipping (nn.LSTM has none). "of GEMM" = useful training FLOPs per second (3x the
forward FLOPs) over the GFLOP/s of a 1024^3 float32 matrix product timed in the same run. `--profile` prints the
top operators of one elmo-hf step.
"""

import argparse
import copy
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elmo_hf import ElmoConfig, ElmoForPreTraining, ElmoModel  # noqa: E402
from elmo_hf.corpus.data import DataCollatorForElmoPreTraining, ElmoWordVocabulary  # noqa: E402
from elmo_hf.modeling_elmo import ElmoCharacterEncoder  # noqa: E402
from elmo_hf.corpus.pretraining import PRESETS  # noqa: E402

PTB_TRAIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "ptb" / "ptb.train.txt"
VOCABULARY_SIZE = 10_002


class TorchLstmBiLm(nn.Module):
    """The same biLM from stock layers: char CNN token layer, per direction and layer an `nn.LSTM(proj_size=P)`,
    residual connections above the first layer, one shared softmax; loss as `ElmoForPreTraining`'s."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.config = config
        self.token_encoder = ElmoCharacterEncoder(config)
        self.lstms = nn.ModuleList(
            nn.LSTM(config.projection_dim, config.lstm_dim, proj_size=config.projection_dim, batch_first=True)
            for _ in range(2 * config.num_layers)
        )
        self.softmax = nn.Linear(config.projection_dim, config.word_vocab_size)

    def _direction(self, tokens: torch.Tensor, lengths: torch.Tensor, first: int) -> torch.Tensor:
        hidden = tokens
        for layer in range(self.config.num_layers):
            packed = nn.utils.rnn.pack_padded_sequence(
                hidden, lengths.cpu(), batch_first=True, enforce_sorted=False  # lengths on the CPU, as it asks
            )
            output, _ = self.lstms[first + 2 * layer](packed)
            output, _ = nn.utils.rnn.pad_packed_sequence(output, batch_first=True, total_length=hidden.shape[1])
            hidden = output + hidden if layer > 0 and self.config.use_skip_connections else output
        return hidden

    def forward(self, input_ids, attention_mask, labels, backward_labels):
        batch_size, sequence_length, chars = input_ids.shape
        lengths = attention_mask.sum(1) + 2
        boundary = ElmoModel.boundary_char_ids_of(self.config)
        char_ids = torch.zeros(batch_size, sequence_length + 2, chars, dtype=input_ids.dtype)
        char_ids[:, 0] = boundary[0]
        char_ids[:, 1:-1] = input_ids
        char_ids[torch.arange(batch_size), lengths - 1] = boundary[1]
        present = torch.arange(sequence_length + 2) < lengths.unsqueeze(1)
        distinct, occurrences = torch.unique(char_ids[present], dim=0, return_inverse=True)
        encoded = self.token_encoder(distinct)
        tokens = encoded.new_zeros(batch_size, sequence_length + 2, encoded.shape[-1])
        tokens[present] = encoded[occurrences]
        # backward direction: each row reversed within its length
        steps = torch.arange(sequence_length + 2)
        reverse = torch.where(steps < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - steps, steps)
        gather = reverse.unsqueeze(-1).expand_as(tokens)
        forward_top = self._direction(tokens, lengths, 0)
        backward_top = self._direction(tokens.gather(1, gather), lengths, 1).gather(1, gather)
        predicted = labels != -100
        forward_nll = nn.functional.cross_entropy(self.softmax(forward_top[:, :-1][predicted]), labels[predicted])
        backward_nll = nn.functional.cross_entropy(
            self.softmax(backward_top[:, 1:][predicted]), backward_labels[predicted]
        )
        return (forward_nll + backward_nll) / 2


def sentences(batch_size: int) -> list[list[str]]:
    if PTB_TRAIN.is_file():
        lines = [line.split() for line in PTB_TRAIN.read_text(encoding="utf-8").splitlines() if line.strip()]
        return lines[1000 : 1000 + batch_size]
    generator = torch.Generator().manual_seed(0)
    return [[f"w{int(i)}" for i in torch.randint(0, 5000, (21,), generator=generator)] for _ in range(batch_size)]


def pretraining_batch(rows: list[list[str]]) -> dict[str, torch.Tensor]:
    """`rows` collated for `ElmoForPreTraining` over a vocabulary of their own words (and the three specials)."""
    vocabulary = ElmoWordVocabulary(["</S>", "<S>", "<UNK>", *dict.fromkeys(word for row in rows for word in row)])
    return DataCollatorForElmoPreTraining(vocabulary)([{"words": row} for row in rows])


def forward_flops(config: ElmoConfig, words: int, sentences: int) -> float:
    """Multiply-adds x 2 of one forward pass over a batch: token layer and LSTMs on words and boundaries, the
    softmax on the `words + sentences` predictions of each direction."""
    chars, embed = config.max_characters_per_token, config.char_embedding_dim
    conv = sum((chars - width + 1) * width * embed * num for width, num in config.filters)
    highway = config.num_highway_layers * 2 * config.num_filters**2
    token_layer = conv + highway + config.num_filters * config.projection_dim
    cell = 2 * config.projection_dim * 4 * config.lstm_dim + config.lstm_dim * config.projection_dim
    lstm = 2 * config.num_layers * cell
    softmax = 2 * config.projection_dim * config.word_vocab_size
    return 2 * (token_layer + lstm) * (words + 2 * sentences) + 2 * softmax * (words + sentences)


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def gemm_gflops(size: int = 1024, repeats: int = 5) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * size**3 / min(times) / 1e9


def time_interleaved(builds: list[tuple], batch: dict, steps: int) -> tuple[list[list[float]], list[float]]:
    """`steps` rounds of one training step per build (after a warm-up step each: allocators, oneDNN), the GEMM
    throughput measured before every round: the seconds of each build's steps, and the GEMM GFLOP/s per round."""
    optimizers = [torch.optim.Adam(model.parameters(), lr=1e-4) for _, model, _ in builds]
    times = [[] for _ in builds]
    gemm = []
    for step in range(steps + 1):
        if step:
            gemm.append(gemm_gflops())
        for (_, model, loss_of), optimizer, build_times in zip(builds, optimizers, times):
            start = time.perf_counter()
            loss_of(model(**batch)).backward()
            optimizer.step()
            optimizer.zero_grad()
            if step:
                build_times.append(time.perf_counter() - start)
    return times, gemm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--architectures", nargs="+", default=["small", "ptb"], choices=sorted(PRESETS))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    rows = sentences(args.batch_size)
    batch = pretraining_batch(rows)
    num_words = sum(map(len, rows))

    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{args.threads} threads; batch {len(rows)} sentences, {num_words} words; load average "
          f"{os.getloadavg()[0]:.2f}")
    print("| architecture | build | words/s | step s (runs) | GFLOP/s | GEMM GFLOP/s | of GEMM | speed vs nn.LSTM |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.architectures:
        config = ElmoConfig(**PRESETS[name], word_vocab_size=VOCABULARY_SIZE, pretraining_dropout=0.0)
        flops = 3 * forward_flops(config, num_words, len(rows))
        torch.manual_seed(0)
        model = ElmoForPreTraining(config).train()
        reference = copy.deepcopy(model)
        reference.config.elmo_implementation = "eager"
        builds = [
            ("elmo-hf", model, lambda output: output.loss),
            ("elmo-hf reference", reference, lambda output: output.loss),
            ("nn.LSTM(proj_size)", TorchLstmBiLm(config).train(), lambda loss: loss),
        ]
        times, gemm_rounds = time_interleaved(builds, batch, args.steps)
        gemm = statistics.median(gemm_rounds)
        stock_step = statistics.median(times[-1])
        for (build, _, _), build_times in zip(builds, times):
            step = statistics.median(build_times)
            runs = ", ".join(f"{t:.2f}" for t in build_times)
            print(f"| {name} | {build} | {num_words / step:,.0f} | {step:.2f} ({runs}) | {flops / step / 1e9:.1f} | "
                  f"{gemm:.0f} | {flops / step / 1e9 / gemm:.1%} | {stock_step / step:.2f}x |")
        if args.profile:
            from torch.profiler import profile

            with profile() as profiler:
                builds[0][1](**batch).loss.backward()
            print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
