"""Does a CPU profile of a real training script carry to the GPU? (issue 41)

Real, small training scripts of the common families are profiled on this CPU with ``srift
profile`` (the user's path), then predicted on cloud GPUs with the simulator, beside srift's own
paths for the same architecture:

| family | the script | compared with |
|---|---|---|
| resnet50 | torchvision's ``resnet50`` (v1.5; 224x224, 1000 classes), AdamW | the zoo path (``--model resnet50``) and the published single- and multi-GPU runs of data/ (Lambda) |
| vit-b16 | torchvision's ``vit_b_16`` with its zero dropouts replaced by ``nn.Identity`` (timm-style slots) | the zoo path (``--model vit-b16``) |
| bert-base-squad | Hugging Face ``BertForQuestionAnswering`` (bert-base shape; transformers when installed, else skipped) | the zoo path and the published SQuAD fine-tuning runs of data/ (Lambda, NVIDIA DeepLearningExamples) |
| lstm-lm | pytorch/examples word_language_model's ``RNNModel`` (sequence-first LSTM, its medium size) | nothing published: its batch and sequence length as read, and its prediction |
| nanogpt | tests/fixtures/train_nanogpt.py (karpathy/nanoGPT's model and loop, dropout 0.0) | the decoder path (a GPT-2 ``config.json`` of the same shape, ``--model-config``) |
| nanogpt-ddp | the same decoder wrapped in DDP, under ``torchrun --nproc_per_node 2`` (gloo) | the decoder path |

The two vision models are torchvision's architectures written out in torch (torchvision 0.28, the
release for torch 2.13, cannot be installed beside this repository's CPU torch build): the same
modules, shapes and parameter counts (25,557,032 and 86,567,656, as the zoo's profiles).

Errors against the zoo and decoder paths are per family: the mean absolute difference of the
iteration time over the GPU configurations in ``TARGETS`` (the same job: batch, sequence, precision,
DDP, synthetic data). Against the published runs: the profile-path prediction of each run (its
GPU, GPU count, batch, precision) with srift's shipped compute model (``fit``), and with the compute
model refitted without the run's model (``lomo``) and without its source (``loso``) on the zoo's
profiles, as scripts/validate.py holds them out; the figure a CPU-profile prediction quotes is the
largest held-out one (srift/perf/accuracy.py ``cpu_profile_typical_error``). ``--write`` stores the
figures in configs/perf/profile_accuracy.json, which that function reads.

    python scripts/validate_profiles.py                  # every family, a few minutes on 2 cores
    python scripts/validate_profiles.py --only resnet50,nanogpt
    python scripts/validate_profiles.py --write          # also write configs/perf/profile_accuracy.json
    python scripts/validate_profiles.py --keep DIR --reuse --write   # again from the profiles a run left in DIR

GPT-2 124M (``--gpt2 PROFILE``): a profile of tests/fixtures/train_nanogpt.py at GPT-2's shape, taken
beforehand (one step takes a minute or more on a laptop CPU, so it is not part of the default run):

    srift profile tests/fixtures/train_nanogpt.py --warmup 1 --iters 2 -o gpt2-124m.yaml -- \
        --batch-size 1 --block-size 1024 --n-layer 12 --n-head 12 --n-embd 768 --vocab 50257
    python scripts/validate_profiles.py --only none --gpt2 gpt2-124m.yaml

prints its backward/forward FLOPs against twice its matmul work (Linear layers and attention), its
prediction on 8 A100 at bf16 (nanoGPT's per-GPU batch 12) beside the decoder path (a GPT-2 config of
the same shape) and the zoo's ``gpt2``, and the host and data time in that prediction.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from srift.api import predict  # noqa: E402
from srift.fitting import compute_fit, datasets, validation  # noqa: E402
from srift.job import Job  # noqa: E402
from srift.perf import compute as C  # noqa: E402
from srift.perf.accuracy import PROFILE_ACCURACY_SCHEMA, profile_accuracy_path  # noqa: E402
from srift.profile import Profile  # noqa: E402
from srift.zoo import load_builtin_profile  # noqa: E402

# The GPU configurations the paths are compared on: (EC2 instance, precision).
TARGETS = (("g5.xlarge", "amp"), ("p3.2xlarge", "amp"), ("p4d.24xlarge:1", "bf16"), ("p5.48xlarge:1", "bf16"))

SCRIPT = '''
import argparse, importlib.util, os, sys
import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--family")
p.add_argument("--batch", type=int, default=2)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--steps", type=int, default=1000)
a = p.parse_args()
torch.manual_seed(0)
ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
if ddp:
    torch.distributed.init_process_group("gloo")


class Bottleneck(nn.Module):  # torchvision.models.resnet.Bottleneck (v1.5: the stride on the 3x3)
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                           if stride != 1 or cin != cout else None)
    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + idt)


def resnet50():  # torchvision.models.resnet50(): 25,557,032 parameters
    layers, cin = [], 64
    for i, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        stage = []
        for b in range(blocks):
            stage.append(Bottleneck(cin, width, 2 if b == 0 and i > 0 else 1))
            cin = width * 4
        layers.append(nn.Sequential(*stage))
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000))


class EncoderBlock(nn.Module):  # torchvision.models.vision_transformer.EncoderBlock
    def __init__(self, d=768, heads=12, mlp=3072):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(d, heads, batch_first=True)
        self.dropout = nn.Dropout(0.0)
        self.ln_2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, mlp), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp, d), nn.Dropout(0.0))
    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + self.dropout(y)
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):  # torchvision.models.vit_b_16(): 86,567,656 parameters
    def __init__(self, d=768, layers=12):
        super().__init__()
        self.conv_proj = nn.Conv2d(3, d, 16, 16)
        self.class_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embedding = nn.Parameter(torch.empty(1, 197, d).normal_(std=0.02))
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.Sequential(*[EncoderBlock(d) for _ in range(layers)])
        self.ln = nn.LayerNorm(d, eps=1e-6)
        self.head = nn.Linear(d, 1000)
    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.ln(self.layers(self.dropout(x + self.pos_embedding)))
        return self.head(x[:, 0])


def vit_b_16():
    return ViT()


def vision(model, size=224, classes=1000):
    x, y = torch.randn(a.batch, 3, size, size), torch.randint(0, classes, (a.batch,))
    return model, lambda: nn.functional.cross_entropy(model(x), y)


def build():
    if a.family == "resnet50":
        return vision(resnet50())
    if a.family == "vit-b16":
        model = vit_b_16()
        for name, mod in list(model.named_modules()):  # timm-style: nn.Identity where the dropout is 0
            for child, sub in list(mod.named_children()):
                if isinstance(sub, nn.Dropout) and sub.p == 0.0:
                    setattr(mod, child, nn.Identity())
        return vision(model)
    if a.family == "bert-base-squad":
        from transformers import BertConfig, BertForQuestionAnswering
        model = BertForQuestionAnswering(BertConfig(attn_implementation="sdpa"))
        ids = torch.randint(0, 30522, (a.batch, a.seq))
        mask = torch.ones_like(ids)
        start, end = torch.randint(0, a.seq, (a.batch,)), torch.randint(0, a.seq, (a.batch,))
        return model, lambda: model(input_ids=ids, attention_mask=mask, start_positions=start, end_positions=end).loss
    if a.family == "lstm-lm":  # pytorch/examples word_language_model: RNNModel("LSTM", 33278, 650, 650, 2)
        class RNNModel(nn.Module):
            def __init__(self, ntoken=33278, ninp=650, nhid=650, nlayers=2, dropout=0.5):
                super().__init__()
                self.drop = nn.Dropout(dropout)
                self.encoder = nn.Embedding(ntoken, ninp)
                self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
                self.decoder = nn.Linear(nhid, ntoken)
            def forward(self, x, hidden):
                out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
                return self.decoder(self.drop(out)), hidden
        model = RNNModel()
        ids, targets = torch.randint(0, 33278, (a.seq, a.batch)), torch.randint(0, 33278, (a.seq * a.batch,))
        def loss():
            hidden = (torch.zeros(2, a.batch, 650), torch.zeros(2, a.batch, 650))
            out, _ = model(ids, hidden)
            return nn.functional.cross_entropy(out.view(-1, 33278), targets)
        return model, loss
    if a.family in ("nanogpt", "nanogpt-ddp"):
        spec = importlib.util.spec_from_file_location("train_nanogpt", os.environ["SRIFT_NANOGPT"])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        model = mod.GPT(512, a.seq, 4, 4, 128, 0.0)
        ids = torch.randint(0, 512, (a.batch, a.seq))
        net = nn.parallel.DistributedDataParallel(model) if ddp else model
        return net, lambda: net(ids, ids)[1]
    raise SystemExit(f"unknown family {a.family}")


model, loss_of = build()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for _ in range(a.steps):
    loss_of().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
'''


@dataclass(frozen=True)
class Family:
    """A family's script arguments and what its profile is compared with."""

    name: str
    batch: int
    seq: int | None = None
    zoo: str | None = None  # the zoo model of the same architecture
    published: str | None = None  # the model name of data/'s published runs
    decoder: dict[str, int] | None = None  # a GPT-2 config of the same shape (decoder path)
    ranks: int = 1  # > 1: under torchrun (gloo)
    needs: str | None = None  # a package the script imports


SMALL_GPT = {"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 512}
FAMILIES = (
    Family("resnet50", 2, zoo="resnet50", published="resnet50"),
    Family("vit-b16", 2, zoo="vit-b16"),
    Family("bert-base-squad", 2, 32, zoo="bert-base-squad", published="bert-base-squad", needs="transformers"),
    Family("lstm-lm", 4, 35),
    Family("nanogpt", 4, 64, decoder=SMALL_GPT),
    Family("nanogpt-ddp", 4, 64, decoder=SMALL_GPT, ranks=2),
)


def profile_family(f: Family, folder: Path, warmup: int, iters: int, reuse: bool = False) -> tuple[Profile, float]:
    """Run the family's script under ``srift profile`` (under torchrun for ``ranks`` > 1), or with
    ``reuse`` load the profile an earlier run left in ``folder`` (0 s)."""
    script = folder / "train_family.py"
    script.write_text(SCRIPT)
    out = folder / f"{f.name}.yaml"
    if reuse and out.is_file():
        return Profile.load(out), 0.0
    srift = [sys.executable, "-m", "srift.cli"]
    cmd = [*srift, "profile", str(script), "--warmup", str(warmup), "--iters", str(iters), "--force", "-o", str(out),
           "--", "--family", f.name, "--batch", str(f.batch), "--seq", str(f.seq or 0)]
    if f.ranks > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(f.ranks),
               "--no-python", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SRIFT_NANOGPT": str(ROOT / "tests/fixtures/train_nanogpt.py")}
    if f.ranks > 1:
        env["OMP_NUM_THREADS"] = "1"
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"{f.name}: srift profile failed:\n{res.stderr[-3000:]}")
    return Profile.load(out), time.perf_counter() - t0


def gpt2_config(folder: Path, shape: dict[str, int], seq: int) -> Path:
    """A GPT-2 config.json of the decoder's shape (the decoder path's input)."""
    path = folder / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_positions": seq, "activation_function": "gelu",
                                "tie_word_embeddings": True, **shape}))
    return path


def path_errors(f: Family, prof_path: Path, folder: Path) -> list[tuple[str, float, float]]:
    """(target, profile-path s, reference-path s) per GPU configuration of ``TARGETS``."""
    out = []
    ref_prof = load_builtin_profile(f.zoo) if f.zoo is not None else None  # the zoo's reference batch and sequence
    batch = ref_prof.batch_size if ref_prof is not None else f.batch
    seq = ref_prof.seq_len if ref_prof is not None else f.seq
    for instance, precision in TARGETS:
        job = Job(batch_size=batch, seq_len=seq, precision=precision, parallelism="ddp", data_loading="synthetic")
        mine = predict(job, profiles=[str(prof_path)], instance=instance).prediction.iteration_time_s
        if f.decoder is not None:
            ref = predict(job, model_config=str(gpt2_config(folder, f.decoder, f.seq or 0)), instance=instance)
        else:
            ref = predict(job, model=f.zoo, instance=instance)
        out.append((f"{instance} {precision}", mine, ref.prediction.iteration_time_s))
    return out


def published(rows: pd.DataFrame, zoo: datasets.ProfileSource, mine: dict[str, Profile]) -> pd.DataFrame:
    """The published runs of the profiled models, predicted from the CPU profiles: with the shipped
    compute model (``pred``), and on one GPU with it refitted without the row's model (``lomo``) or
    source (``loso``) on the zoo's profiles (scripts/validate.py's hold-outs)."""
    cpu = datasets.ProfileSource(lambda m, b, s: mine[m].rescale(batch_size=b, seq_len=s))
    rows = rows[rows["model"].isin(mine)].reset_index(drop=True)
    rows["pred"] = validation.simulate_rows(rows, cpu)["pred"].to_numpy()
    rows["zoo"] = validation.simulate_rows(rows, zoo)["pred"].to_numpy()
    all_rows = datasets.load_rows(ROOT / "data")
    single_all = all_rows[all_rows["n_gpus"] == 1].reset_index(drop=True)
    for key, col in (("model", "lomo"), ("source", "loso")):
        fits = compute_fit.held_out_fits(single_all, zoo, key)
        held = np.full(len(rows), np.nan)
        for i, r in enumerate(rows.itertuples()):
            if r.n_gpus == 1 and getattr(r, key) in fits:
                held[i] = C.layer_times(cpu.for_row(r), r.gpu, r.precision, fits[getattr(r, key)]).total_s
        rows[col] = held
    return rows


GPT2_SHAPE = {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257}
GPT2_JOB = Job(batch_size=12, seq_len=1024, precision="bf16", parallelism="ddp")  # nanoGPT's train_gpt2.py config


def gpt2_check(path: Path, folder: Path) -> None:
    """The GPT-2 124M figures of issue 41 from a profile taken beforehand (module docstring)."""
    prof = Profile.load(path)
    matmul = sum(la.fwd_flops if la.type == "Linear" else la.fwd_flops_seq2 for la in prof.layers)
    print(f"\nGPT-2 124M profile {path}: batch {prof.batch_size}, seq_len {prof.seq_len}, {prof.params:,} parameters")
    print(f"  forward {prof.fwd_flops / 1e9:,.1f} GFLOP (matmuls and attention {matmul / 1e9:,.1f}), backward "
          f"{prof.bwd_flops / 1e9:,.1f} GFLOP: backward / (2 x matmul work) = {prof.bwd_flops / (2 * matmul):.3f}, "
          f"backward / forward = {prof.bwd_flops / prof.fwd_flops:.3f}")
    ph = prof.phases
    print(f"  measured on this CPU per step: total {ph.total_s or 0:.2f} s, data {ph.data_s or 0:.4f} s, "
          f"zero_grad {ph.zero_grad_s or 0:.4f} s, host {ph.host_s or 0:.4f} s")
    cfg = gpt2_config(folder, GPT2_SHAPE, 1024)
    for instance in ("p4d.24xlarge:1",):
        mine = predict(GPT2_JOB, profiles=[str(path)], instance=instance).prediction
        dec = predict(GPT2_JOB, model_config=str(cfg), instance=instance).prediction
        zoo = predict(GPT2_JOB, model="gpt2", instance=instance).prediction
        host = mine.breakdown["data"] + mine.breakdown["overhead"]
        print(f"  {instance} bf16, batch 12 x 1024 per GPU, DDP: profile path {mine.iteration_time_s * 1e3:.1f} ms, "
              f"decoder path {dec.iteration_time_s * 1e3:.1f} ms ({mine.iteration_time_s / dec.iteration_time_s - 1:+.1%}), "
              f"zoo gpt2 {zoo.iteration_time_s * 1e3:.1f} ms ({mine.iteration_time_s / zoo.iteration_time_s - 1:+.1%})")
        print(f"  host and data time in the profile-path prediction: {host * 1e3:.2f} ms "
              f"({host / mine.iteration_time_s:.1%} of the step); {mine.tokens_per_s_per_gpu:,.0f} tokens/s per GPU "
              f"(decoder path {dec.tokens_per_s_per_gpu:,.0f})")
        print(f"  quoted: ±{mine.typical_error_pct} % ({mine.typical_error_basis})")


def mape(pred: pd.Series, meas: pd.Series) -> float:
    return float((np.abs(pred / meas - 1.0)).mean() * 100.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated families (default: all)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="write configs/perf/profile_accuracy.json")
    ap.add_argument("--keep", help="a folder to keep the profiles in (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true", help="with --keep: load the profiles an earlier run left there")
    ap.add_argument("--gpt2", help="a GPT-2 124M profile taken beforehand (see above): print its figures")
    args = ap.parse_args()
    wanted = set(args.only.split(",")) if args.only else None
    families = [f for f in FAMILIES if wanted is None or f.name in wanted]
    profiles: dict[str, Profile] = {}
    print(f"{'family':<18}{'batch':>6}{'seq':>6}{'bwd/fwd':>9}{'profiled s':>12}   "
          f"{'vs':<8}{'mean |err| %':>13}  per target (profile / reference ms)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for f in families:
            if f.needs and not _importable(f.needs):
                print(f"{f.name:<18}skipped: {f.needs} is not installed")
                continue
            prof, took = profile_family(f, folder, args.warmup, args.iters, args.reuse and bool(args.keep))
            profiles[f.name] = prof
            ratio = prof.bwd_flops / prof.fwd_flops
            vs = "decoder" if f.decoder else "zoo" if f.zoo else "-"
            if vs == "-":
                print(f"{f.name:<18}{prof.batch_size:>6}{prof.seq_len or '-':>6}{ratio:>9.2f}{took:>12.0f}   "
                      f"(no zoo or decoder path for it)")
                continue
            errs = path_errors(f, folder / f"{f.name}.yaml", folder)
            mean = float(np.mean([abs(a / b - 1.0) for _, a, b in errs]) * 100.0)
            per = ", ".join(f"{t}: {a * 1e3:.1f}/{b * 1e3:.1f}" for t, a, b in errs)
            print(f"{f.name:<18}{prof.batch_size:>6}{prof.seq_len or '-':>6}{ratio:>9.2f}{took:>12.0f}   "
                  f"{vs:<8}{mean:>13.1f}  {per}")
        if args.gpt2:
            gpt2_check(Path(args.gpt2), folder)
        kept = {f.published: profiles[f.name] for f in families if f.published and f.name in profiles}
        if not kept:
            return 0
        zoo = datasets.ProfileSource(lambda m, b, s: load_builtin_profile(m, b, s))
        rows = published(datasets.load_rows(ROOT / "data"), zoo, kept)
    print("\nAgainst the published GPU runs of data/ (MAPE %, iteration time; zoo = the zoo path on the same rows):")
    print(f"{'model':<18}{'gpus':<8}{'rows':>6}{'profile':>9}{'zoo':>7}{'lomo':>7}{'loso':>7}")
    for (model, multi), s in rows.groupby(["model", rows["n_gpus"] > 1]):
        held = s.dropna(subset=["lomo"])
        lomo = f"{mape(held['lomo'], held['iteration_time_s']):>7.1f}" if len(held) else f"{'':>7}"
        loso = f"{mape(held['loso'], held['iteration_time_s']):>7.1f}" if len(held) else f"{'':>7}"
        print(f"{model:<18}{'2-16' if multi else '1':<8}{len(s):>6}{mape(s['pred'], s['iteration_time_s']):>9.1f}"
              f"{mape(s['zoo'], s['iteration_time_s']):>7.1f}{lomo}{loso}")
    single = rows[rows["n_gpus"] == 1]
    figures = {"rows": int(len(rows)), "fit": round(mape(rows["pred"], rows["iteration_time_s"]), 1),
               "held_out_rows": int(single["lomo"].notna().sum()),
               "lomo": round(mape(single["lomo"], single["iteration_time_s"]), 1),
               "loso": round(mape(single["loso"], single["iteration_time_s"]), 1),
               "bias_pct": round(float((rows["iteration_time_s"] / rows["pred"] - 1.0).mean() * 100.0), 1),
               "basis": (f"CPU profiles of {', '.join(sorted(kept))} training scripts (srift profile on "
                         f"{os.cpu_count()} CPU cores) predicted against {len(rows)} published GPU runs of data/")}
    print(f"\nall: {figures['rows']} runs, profile path {figures['fit']} %, held out: model {figures['lomo']} %, "
          f"source {figures['loso']} % (single GPU); bias {figures['bias_pct']:+.1f} %")
    if args.write:
        path = profile_accuracy_path()
        path.write_text(json.dumps({"schema": PROFILE_ACCURACY_SCHEMA, "source": "scripts/validate_profiles.py",
                                    "groups": {"cpu_profile": figures}}, indent=2) + "\n")
        print(f"wrote {path}")
    return 0


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    sys.exit(main())
