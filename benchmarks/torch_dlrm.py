#!/usr/bin/env python3
"""A plain PyTorch DLRM, the reference heterps's GPU figures are compared with (scripts/gpu-bench.sh).

    python3 benchmarks/torch_dlrm.py --data train.tsv [--batch 2048] [--device cuda] [--out r.json]

dlrm-small as examples/models/dlrm-small.yaml describes it, written the way a PyTorch user would:
26 nn.EmbeddingBag tables of 100,000 rows x 16 (a categorical value hashed into its slot's table),
the 13 integer features as log(1 + max(x, 0)), a 13-64-16 bottom MLP, the pairwise dot products of
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


class Dlrm(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=True) for _ in range(SLOTS))
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
        self.register_buffer("rows", rows)
        self.register_buffer("cols", cols)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        vectors = [t(sparse[:, s:s + 1]) for s, t in enumerate(self.tables)]
        z = torch.stack([x] + vectors, dim=1)
        gram = torch.bmm(z, z.transpose(1, 2))
        return self.top(torch.cat([x, gram[:, self.rows, self.cols]], dim=1)).squeeze(1)


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
    flags = parser.parse_args()
    torch.manual_seed(1)
    device = torch.device(flags.device)
    labels, dense, sparse = read(flags.data)
    held = torch.arange(len(labels)) % 10 == 9
    train = [t[~held].to(device) for t in (labels, dense, sparse)]
    evaluate = [t[held].to(device) for t in (labels, dense, sparse)]
    model = Dlrm().to(device)
    sparse_opt = torch.optim.Adagrad(model.tables.parameters(), lr=0.05,
                                     initial_accumulator_value=0)
    dense_opt = torch.optim.Adam(list(model.bottom.parameters()) + list(model.top.parameters()),
                                 lr=0.001)
    loss_fn = nn.BCEWithLogitsLoss()
    n = len(train[0])
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
    result = {"framework": "pytorch " + torch.__version__, "device": str(device),
              "samples_per_second": n / seconds, "eval_auc": auc(scores.cpu(), evaluate[0].cpu()),
              "train_samples": n}
    print(json.dumps(result))
    if flags.out:
        json.dump(result, open(flags.out, "w"), indent=1)


if __name__ == "__main__":
    main()
