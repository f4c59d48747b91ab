#!/usr/bin/env python3
"""How well heterps learns in its first epochs on real data, against a plain PyTorch model.

    python3 benchmarks/first_epoch.py --movielens DIR [--heterps build/tools/heterps]
        [--epochs 1 3] [--seeds 1 2 3] [--batch 256]

DIR is MovieLens 100K as GroupLens ships it (u.data, u.user, u.item). The script writes one CSV
(every rating with its user's age, gender and occupation and its movie's genres, in an order
shuffled with seed 1) and a model spec (benchmarks/first_epoch_movielens.yaml: the label is a
rating of 4 or more, age a dense feature, user, movie, gender and occupation one id each, genres
multi-hot and mean-pooled; a dot interaction, embeddings of 16), then trains it for each number
of epochs and each seed:

- with `heterps train --single-process`, once per embedding optimizer setting in SETTINGS
  (heterps's defaults, and its former defaults written into the spec's `optimizer` section);
- with the same model written the way a PyTorch user would (nn.EmbeddingBag per slot, mean
  pooling, nn.Linear layers), initialised as heterps initialises, trained in the same order on
  the same lines with each optimizer in TORCH;

and prints the eval AUC on the held-out lines (every 10th line, as heterps holds them out) of
each, the mean over the seeds, and the ratio of heterps's default to the best PyTorch setting.
Needs PyTorch (Debian: python3-torch) for the PyTorch half; --no-torch skips it.
"""

import argparse
import math
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "first_epoch_movielens.yaml")
GENRES = ["unknown", "Action", "Adventure", "Animation", "Children", "Comedy", "Crime",
          "Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery",
          "Romance", "Sci-Fi", "Thriller", "War", "Western"]
EVAL_EVERY = 10

# heterps's embedding optimizer settings: None keeps the spec's (the defaults); else the
# `optimizer.embeddings` mapping written into a copy of the spec ({batch}: the batch size).
SETTINGS = [
    ("heterps default", None),
    ("heterps's former default: adagrad at 0.05 x batch / 256, accumulator 0.1",
     "{{kind: adagrad, lr: {old_lr}, initial_accumulator: 0.1}}"),
]
# PyTorch's optimizers for the embeddings: (name, kind, lr, initial accumulator); the dense
# layers: Adam at 0.001 in every case. None as lr: 0.05 x batch / 256.
TORCH = [
    ("torch: Adam at 0.001 everywhere", "adam", 0.001, 0),
    ("torch: Adagrad at PyTorch's defaults (0.01, accumulator 0)", "adagrad", 0.01, 0),
    ("torch: Adagrad at 0.05, accumulator 0", "adagrad", 0.05, 0),
    ("torch: Adagrad at 0.05 x batch / 256, accumulator 0.1", "adagrad", None, 0.1),
]


def write_csv(movielens, out):
    users = {}
    with open(os.path.join(movielens, "u.user"), encoding="latin-1") as f:
        for line in f:
            fields = line.rstrip("\n").split("|")
            users[fields[0]] = fields[1:4]  # age, gender, occupation
    items = {}
    with open(os.path.join(movielens, "u.item"), encoding="latin-1") as f:
        for line in f:
            fields = line.rstrip("\n").split("|")
            items[fields[0]] = "|".join(g for g, x in zip(GENRES, fields[5:24]) if x == "1")
    with open(os.path.join(movielens, "u.data")) as f:
        rows = [line.split("\t") for line in f if line.strip()]
    random.Random(1).shuffle(rows)
    with open(out, "w") as o:
        o.write("rating,age,gender,occupation,user_id,movie_id,genres\n")
        for user, movie, rating, _ in rows:
            age, gender, occupation = users[user]
            o.write(f"{rating},{age},{gender},{occupation},{user},{movie},{items[movie]}\n")
    return len(rows)


def heterps_auc(binary, spec, data, epochs, seed, batch):
    out = subprocess.run([binary, "train", "--single-process", "--model", spec, "--data", data,
                          "--epochs", str(epochs), "--seed", str(seed), "--batch", str(batch)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"heterps train failed: {out.stderr.strip()}")
    match = re.search(r"eval AUC\s+([0-9.]+)", out.stdout + out.stderr)
    if not match:
        sys.exit("heterps train printed no eval AUC")
    return float(match.group(1))


def spec_with(embeddings, directory, batch):
    with open(SPEC) as f:
        text = f.read()
    if embeddings is None:
        return SPEC
    embeddings = embeddings.format(old_lr=0.05 * batch / 256)
    path = os.path.join(directory, "spec.yaml")
    with open(path, "w") as f:
        f.write(text.replace("\ndata:", f"\noptimizer:\n  embeddings: {embeddings}\ndata:", 1))
    return path


def torch_runs(data, epochs_list, seeds, batch):
    import torch
    import torch.nn as nn

    columns = ["gender", "occupation", "user_id", "movie_id"]
    vocab = [dict() for _ in range(len(columns) + 1)]  # the last: genres
    train, held = [], []
    with open(data) as f:
        header = f.readline().rstrip("\n").split(",")
        at = {name: i for i, name in enumerate(header)}
        for n, line in enumerate(f):
            fields = line.rstrip("\n").split(",")
            label = 1.0 if float(fields[at["rating"]]) >= 4 else 0.0
            age = math.log1p(max(float(fields[at["age"]]), 0.0))
            ids = [vocab[s].setdefault(fields[at[c]], len(vocab[s])) for s, c in enumerate(columns)]
            genres = [vocab[-1].setdefault(g, len(vocab[-1]))
                      for g in (fields[at["genres"]].split("|") if fields[at["genres"]] else [""])]
            (held if n % EVAL_EVERY == EVAL_EVERY - 1 else train).append((label, age, ids, genres))
    slots = len(columns) + 1

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            # Initialised as heterps initialises: rows uniform in +-sqrt(1 / rows) (the spec's
            # rows), linear layers uniform in +-sqrt(6 / (in + out)).
            self.tables = nn.ModuleList(nn.EmbeddingBag(len(v), 16, mode="mean") for v in vocab)
            self.bottom = nn.Sequential(nn.Linear(1, 16), nn.ReLU())
            pairs = (slots + 1) * slots // 2
            self.top = nn.Sequential(nn.Linear(16 + pairs, 64), nn.ReLU(), nn.Linear(64, 1))
            for table in self.tables:
                nn.init.uniform_(table.weight, -math.sqrt(1 / 3000), math.sqrt(1 / 3000))
            for layer in list(self.bottom) + list(self.top):
                if isinstance(layer, nn.Linear):
                    bound = math.sqrt(6 / (layer.in_features + layer.out_features))
                    nn.init.uniform_(layer.weight, -bound, bound)
                    nn.init.uniform_(layer.bias, -bound, bound)

        def forward(self, age, ids, genre_ids, genre_offsets):
            x = self.bottom(age)
            vectors = [x] + [self.tables[s](ids[:, s:s + 1]) for s in range(slots - 1)]
            vectors.append(self.tables[-1](genre_ids, genre_offsets))
            v = torch.stack(vectors, dim=1)
            dots = torch.bmm(v, v.transpose(1, 2))
            i, j = torch.triu_indices(slots + 1, slots + 1, offset=1)
            return self.top(torch.cat([x, dots[:, i, j]], dim=1)).squeeze(1)

    def tensors(rows):
        labels = torch.tensor([r[0] for r in rows])
        age = torch.tensor([[r[1]] for r in rows])
        ids = torch.tensor([r[2] for r in rows], dtype=torch.int64)
        flat, offsets = [], []
        for r in rows:
            offsets.append(len(flat))
            flat.extend(r[3])
        return labels, age, ids, torch.tensor(flat, dtype=torch.int64), torch.tensor(offsets)

    def auc(scores, labels):
        order = sorted(range(len(scores)), key=lambda k: scores[k])
        ranks, k = [0.0] * len(scores), 0
        while k < len(order):
            m = k
            while m + 1 < len(order) and scores[order[m + 1]] == scores[order[k]]:
                m += 1
            for q in range(k, m + 1):
                ranks[order[q]] = (k + m) / 2 + 1
            k = m + 1
        positives = sum(labels)
        negatives = len(labels) - positives
        rank_sum = sum(r for r, y in zip(ranks, labels) if y == 1)
        return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)

    eval_set = tensors(held)
    results = {}
    for name, kind, lr, start in TORCH:
        lr = 0.05 * batch / 256 if lr is None else lr
        for epochs in epochs_list:
            for seed in seeds:
                torch.manual_seed(seed)
                model = Model()
                dense = list(model.bottom.parameters()) + list(model.top.parameters())
                if kind == "adam":
                    optimizers = [torch.optim.Adam(model.parameters(), lr=lr)]
                else:
                    optimizers = [torch.optim.Adagrad(model.tables.parameters(), lr=lr,
                                                      initial_accumulator_value=start),
                                  torch.optim.Adam(dense, lr=0.001)]
                loss_fn = nn.BCEWithLogitsLoss()
                for _ in range(epochs):
                    for b in range(0, len(train), batch):
                        labels, age, ids, flat, offsets = tensors(train[b:b + batch])
                        for o in optimizers:
                            o.zero_grad()
                        loss_fn(model(age, ids, flat, offsets), labels).backward()
                        for o in optimizers:
                            o.step()
                with torch.no_grad():
                    labels, age, ids, flat, offsets = eval_set
                    scores = model(age, ids, flat, offsets).tolist()
                results[(name, epochs, seed)] = auc(scores, labels.tolist())
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--movielens", required=True, help="MovieLens 100K folder")
    parser.add_argument("--heterps", default="build/tools/heterps")
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--no-torch", action="store_true")
    flags = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "movielens.csv")
        rows = write_csv(flags.movielens, data)
        print(f"MovieLens 100K: {rows} ratings, every {EVAL_EVERY}th held out; batch {flags.batch}; "
              f"seeds {' '.join(map(str, flags.seeds))}")
        results = {}
        for name, embeddings in SETTINGS:
            spec = spec_with(embeddings, tmp, flags.batch)
            for epochs in flags.epochs:
                for seed in flags.seeds:
                    results[(name, epochs, seed)] = heterps_auc(flags.heterps, spec, data, epochs,
                                                                seed, flags.batch)
        names = [n for n, _ in SETTINGS]
        if not flags.no_torch:
            results.update(torch_runs(data, flags.epochs, flags.seeds, flags.batch))
            names += [t[0] for t in TORCH]
    mean = {(n, e): sum(results[(n, e, s)] for s in flags.seeds) / len(flags.seeds)
            for n in names for e in flags.epochs}
    print("| setting | " + " | ".join(f"eval AUC, {e} epoch{'s' * (e > 1)}"
                                        for e in flags.epochs) + " |")
    print("|---|" + "---:|" * len(flags.epochs))
    for n in names:
        cells = []
        for e in flags.epochs:
            spread = max(results[(n, e, s)] for s in flags.seeds) - min(
                results[(n, e, s)] for s in flags.seeds)
            cells.append(f"{mean[(n, e)]:.4f} (±{spread / 2:.4f})")
        print(f"| {n} | " + " | ".join(cells) + " |")
    if not flags.no_torch:
        for e in flags.epochs:
            best = max((mean[(t[0], e)], t[0]) for t in TORCH)
            print(f"{e} epoch(s): heterps default {mean[('heterps default', e)]:.4f}, best PyTorch "
                  f"{best[0]:.4f} ({best[1]}): ratio {mean[('heterps default', e)] / best[0]:.4f}")


if __name__ == "__main__":
    main()
