#!/usr/bin/env python3
"""A plain PyTorch DLRM, the reference heterps's GPU figures are compared with (scripts/gpu-bench.sh).

    python3 benchmarks/torch_dlrm.py --data train.tsv [--batch 2048] [--device cuda] [--out r.json]
        [--per-table] [--compile] [--threads N]

dlrm-small as examples/models/dlrm-small.yaml describes it, written as PyTorch's own experts write
it (TorchRec's and NVIDIA's DLRM examples): the 26 tables of 100,000 rows x 16 are one
nn.EmbeddingBag of 2,600,000 rows, looked up in one call per step (slot s's ids offset by
s x 100,000, as TorchRec's fused tables and the DLRM reference's --use-fused-tables do) with
sparse gradients; --per-table looks them up as 26 nn.EmbeddingBag modules instead (the naive
program, 26 calls and 26 sparse updates a step: slower, kept to show the difference); --compile
runs the dense part (the bottom MLP, the interaction, the top MLP) through torch.compile;
--threads sets torch's intra-op threads (the default: PyTorch's own). A categorical value is hashed
into its slot's rows; the 13 integer features as log(1 + max(x, 0)), a 13-64-16 bottom MLP, the pairwise dot products of
the 27 vectors, a 367-256-128-1 top MLP; Adagrad on the embeddings at 0.05 (its accumulator
starting at 0) and Adam at 0.001 on the rest, on the batch's mean log loss, as heterps trains by default. Initialised as
heterps initialises (and as the DLRM reference code does): embedding rows uniform in
+-sqrt(1 / rows), not nn.EmbeddingBag's N(0, 1), whose large random vectors swamp the dot
interaction (an eval AUC of 0.62 where heterps reaches 0.80); each linear layer's weights and bias
uniform in +-sqrt(6 / (in + out)). One epoch, in file order, over the lines that are not held out
(every 10th line is, as heterps holds it out), then the AUC on the held-out lines. Prints and
writes samples/s (training only, the data already on the device) and the eval AUC.

Where it still differs from heterps: heterps gives every distinct value of a slot its own row
(a table's `rows` only sizes it for the planner), and an empty field a row of its own; here values
share the 100,000 rows of their slot's table by their id modulo 100,000, an empty field row 0.
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn

ROWS, DIM, SLOTS, DENSE = 100000, 16, 26, 13


def read(path):
    labels, dense, sparse = [], [], []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            labels.append(float(fields[0]))
            dense.append([float(x) if x else 0.0 for x in fields[1:1 + DENSE]])
            sparse.append([int(x, 16) % ROWS if x else 0 for x in fields[1 + DENSE:]])
    return (torch.tensor(labels), torch.log1p(torch.tensor(dense).clamp(min=0)),
            torch.tensor(sparse, dtype=torch.int64))


class Dense(nn.Module):
    """The bottom MLP, the pairwise dots of the 27 vectors, the top MLP: the logits."""

    def __init__(self, bottom, top, rows, cols):
        super().__init__()
        self.bottom, self.top = bottom, top
        self.register_buffer("rows", rows)
        self.register_buffer("cols", cols)

    def forward(self, dense, vectors):
        x = self.bottom(dense)
        z = torch.cat([x.unsqueeze(1), vectors], dim=1)
        gram = torch.bmm(z, z.transpose(1, 2))
        return self.top(torch.cat([x, gram[:, self.rows, self.cols]], dim=1)).squeeze(1)


class Dlrm(nn.Module):
    def __init__(self, per_table):
        super().__init__()
        self.per_table = per_table
        if per_table:
            self.tables = nn.ModuleList(
                nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=True) for _ in range(SLOTS))
        else:
            self.tables = nn.ModuleList([nn.EmbeddingBag(SLOTS * ROWS, DIM, mode="sum",
                                                         sparse=True)])
        self.register_buffer("slot_base", torch.arange(SLOTS, dtype=torch.int64) * ROWS)
        self.bottom = nn.Sequential(nn.Linear(DENSE, 64), nn.ReLU(), nn.Linear(64, 16), nn.ReLU())
        pairs = (SLOTS + 1) * SLOTS // 2
        self.top = nn.Sequential(nn.Linear(16 + pairs, 256), nn.ReLU(), nn.Linear(256, 128),
                                 nn.ReLU(), nn.Linear(128, 1))
        for table in self.tables:
            nn.init.uniform_(table.weight, -math.sqrt(1 / ROWS), math.sqrt(1 / ROWS))
        for layer in list(self.bottom) + list(self.top):
            if isinstance(layer, nn.Linear):
                bound = math.sqrt(6 / (layer.in_features + layer.out_features))
                nn.init.uniform_(layer.weight, -bound, bound)
                nn.init.uniform_(layer.bias, -bound, bound)
        rows, cols = torch.triu_indices(SLOTS + 1, SLOTS + 1, offset=1)
        self.dense = Dense(self.bottom, self.top, rows, cols)

    def forward(self, dense, sparse):
        if self.per_table:
            vectors = torch.stack([t(sparse[:, s:s + 1]) for s, t in enumerate(self.tables)],
                                  dim=1)
        else:
            # One bag per (sample, slot), one id each: the whole batch in one call.
            ids = (sparse + self.slot_base).reshape(-1)
            vectors = self.tables[0](ids.reshape(-1, 1)).reshape(-1, SLOTS, DIM)
        return self.dense(dense, vectors)


def auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(order, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float64)
    positives = labels.sum().item()
    negatives = len(labels) - positives
    return ((ranks[labels > 0.5].sum().item() - positives * (positives + 1) / 2)
            / (positives * negatives))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out")
    parser.add_argument("--per-table", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--threads", type=int, default=0)
    flags = parser.parse_args()
    if flags.threads > 0:
        torch.set_num_threads(flags.threads)
    torch.manual_seed(1)
    device = torch.device(flags.device)
    labels, dense, sparse = read(flags.data)
    held = torch.arange(len(labels)) % 10 == 9
    train = [t[~held].to(device) for t in (labels, dense, sparse)]
    evaluate = [t[held].to(device) for t in (labels, dense, sparse)]
    model = Dlrm(flags.per_table).to(device)
    if flags.compile:
        model.dense = torch.compile(model.dense)
    sparse_opt = torch.optim.Adagrad(model.tables.parameters(), lr=0.05,
                                     initial_accumulator_value=0)
    dense_opt = torch.optim.Adam(list(model.bottom.parameters()) + list(model.top.parameters()),
                                 lr=0.001)
    loss_fn = nn.BCEWithLogitsLoss()
    n = len(train[0])
    if flags.compile:
        # The compilation (tens of seconds) is not training: a forward and backward at each batch
        # size the epoch meets (the last batch may be shorter) first, their gradients dropped.
        state = {k: v.clone() for k, v in model.state_dict().items()}
        for size in sorted({min(flags.batch, n), n % flags.batch} - {0}):
            y, d, s = (t[:size] for t in train)
            loss_fn(model(d, s), y).backward()
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for at in range(0, n, flags.batch):
        y, d, s = (t[at:at + flags.batch] for t in train)
        loss = loss_fn(model(d, s), y)
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        scores = torch.cat([torch.sigmoid(model(evaluate[1][at:at + 8192], evaluate[2][at:at + 8192]))
                            for at in range(0, len(evaluate[0]), 8192)])
    what = ("26 EmbeddingBag calls" if flags.per_table else "one fused EmbeddingBag call") + (
        ", torch.compile" if flags.compile else "")
    result = {"framework": "pytorch " + torch.__version__, "program": what,
              "threads": torch.get_num_threads(), "device": str(device),
              "samples_per_second": n / seconds, "eval_auc": auc(scores.cpu(), evaluate[0].cpu()),
              "train_samples": n}
    print(json.dumps(result))
    if flags.out:
        json.dump(result, open(flags.out, "w"), indent=1)


if __name__ == "__main__":
    main()
