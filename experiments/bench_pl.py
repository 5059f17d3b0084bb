"""Plackett-Luce in torchfair against plain Gumbel-sort PyTorch code computing the same numbers (fp32, CPU).

The plain implementations are written below, straightforwardly (no torchfair), for full lists (no padding):

* sampling: ``argsort(m + Gumbel, descending)`` with ``m`` the scores minus their row maximum and the Gumbel
  noise ``-log(-log(U))`` from ``torch.rand(S, B, N, generator=...)``, i.e. the same random numbers as torchfair:
  the same seed gives the same rankings (checked);
* expected exposure under RBP(0.9): ``F(k)`` scattered to the sampled items, averaged over the samples;
* PL-Rank-2 (Oosterhuis, SIGIR 2021, the gradient of ``sum_d w_d E[F(pos_d)]``), written as in the paper's
  reference code with ``exp(m)`` and cumulative sums of ``1 / Z_k``, with the per-list mean reward subtracted
  (torchfair's baseline, so that the two compute the same numbers);
* the score-function (REINFORCE) gradient with a leave-one-out baseline, ``log pi(y)`` by ``exp`` and a reversed
  ``cumsum`` for the normalisers, autograd for the rest;
* DIPS under the sampled rankings (``contract(which="joint")`` with the UDP pair weight, what ``dips`` and the
  DIPS loss compute): dense ``[s, B, N, N]`` pair tensors a few samples at a time; its score-function and PL-Rank
  gradients (the latter dense per sample, as the PL-Rank-2 reward of a pair).

torchfair's path is the public API as the losses use it: ``PlackettLuce(samples, estimator, generator,
temperature=1.0, scale="none")(x, mask)`` (the policy ``softmax(x)`` the plain code samples)
then ``.exposure(RBP(0.9))`` or ``dips(...)``, and ``.backward()``.  Each case checks that both give the same
rankings, values and gradients (to a tolerance), then times them interleaved in one process: ``--rounds`` rounds,
each running both implementations once (alternating which goes first); the reported ratio is the median over the
rounds of torchfair's time / plain time (robust to load from other processes), the times are medians.

Writes a Markdown table to ``experiments/results/bench_pl.md`` (``--out``) and prints it.
Usage: ``python experiments/bench_pl.py [--rounds 15] [--threads 1] [--quick] [--only exposure]``.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import interleaved, ratio  # noqa: E402  (the shared harness)

GAMMA = 0.9


# ------------------------------------------------------------------------------------------ plain reference code
def plain_rankings(scores: torch.Tensor, S: int, gen: torch.Generator) -> torch.Tensor:
    m = scores - scores.detach().max(-1, keepdim=True).values
    u = torch.rand((S, *scores.shape), generator=gen, dtype=scores.dtype)
    return torch.argsort(m.detach() + -torch.log(-torch.log(u)), dim=-1, descending=True)


def plain_fk(N: int, dtype=torch.float32) -> torch.Tensor:
    return GAMMA ** torch.arange(N, dtype=dtype)


def plain_exposure(rankings: torch.Tensor, fk: torch.Tensor) -> torch.Tensor:
    S, B, N = rankings.shape
    return torch.zeros(S, B, N).scatter_(-1, rankings, fk.expand(S, B, N)).mean(0)


def plain_pl_rank(scores, rankings, fk, w):
    """PL-Rank-2 gradient of sum_d w_d E[F(pos_d)] w.r.t. the scores (temperature 1), baseline: mean reward."""
    S, B, N = rankings.shape
    w = w - w.mean(-1, keepdim=True)
    m = scores.detach() - scores.detach().max(-1, keepdim=True).values
    ex = torch.exp(m).expand(S, B, N).gather(-1, rankings)  # e^{m} of the item at each step
    Z = ex.flip(-1).cumsum(-1).flip(-1)  # normaliser of each step
    ws = w.expand(S, B, N).gather(-1, rankings)
    G = (ws * fk).flip(-1).cumsum(-1).flip(-1)  # reward to go
    cw = (fk / Z).cumsum(-1)
    cr = (G / Z).cumsum(-1)
    G_next = torch.cat([G[..., 1:], torch.zeros(S, B, 1)], -1)
    gs = G_next + ex * (ws * cw - cr)
    return torch.zeros(S, B, N).scatter_(-1, rankings, gs).mean(0)


def plain_log_prob(scores, rankings):
    S, B, N = rankings.shape
    m = scores - scores.detach().max(-1, keepdim=True).values
    ms = m.expand(S, B, N).gather(-1, rankings)
    Z = torch.exp(ms).flip(-1).cumsum(-1).flip(-1)
    return (ms - torch.log(Z)).sum(-1)  # [S, B]


def plain_sf_weights(lp):
    """Sample weights whose gradient is the leave-one-out score-function estimate (value 1/S)."""
    S = lp.shape[0]
    d = lp - lp.detach()
    return 1.0 / S + (S * d - d.sum(0, keepdim=True)) / (S * (S - 1))


def _udp(rel):
    ri, rj = rel[:, :, None], rel[:, None, :]
    W = (ri > rj).float() + 0.5 * (ri == rj).float()
    return W * (1 - torch.eye(rel.shape[1]))


def plain_envy(rankings, fk, W, memb, weights, chunk_elems=2 ** 22):
    """sum_s weights[s] * envy_s[b, i, h], envy_s = sum_j W[i, j] F(pos_j) 1(pos_j < pos_i) memb[j, h]."""
    S, B, N = rankings.shape
    ar = torch.arange(N).expand(S, B, N)
    pos = torch.empty_like(rankings).scatter_(-1, rankings, ar)
    step = max(1, chunk_elems // (B * N * N))
    out = 0
    for s0 in range(0, S, step):
        p = pos[s0:s0 + step]
        above = (p[:, :, None, :] < p[:, :, :, None]).float()  # [s, B, i, j]
        J = above * fk[p][:, :, None, :] * W
        out = out + torch.einsum("sbij,bjh,sb->bih", J, memb, weights[s0:s0 + step])
    return out


def plain_dips(envy, memb, fk):
    Sgh = torch.einsum("big,bih->bgh", memb, envy)
    sizes = memb.sum(1)  # [B, G]
    cum = torch.cat([torch.zeros(1), fk.cumsum(0)])[sizes.long()]
    a = sizes[:, :, None] * cum[:, None, :]
    C = torch.maximum(a, a.transpose(1, 2))
    return torch.where(C > 0, Sgh / C.clamp(min=1e-30), torch.zeros(()))


def plain_pl_rank_pairs(scores, rankings, fk, C, chunk_elems=2 ** 22):
    """PL-Rank-2 gradient of E[sum_{i,j} C[i,j] F(pos_j) 1(pos_j < pos_i)] (pair reward r_k(d) = F(k) sum of C[i, d]
    over the items i not placed before step k), with C centred over the real pairs (torchfair's baseline)."""
    S, B, N = rankings.shape
    off = 1 - torch.eye(N)
    C = (C - (C * off).sum((-1, -2), keepdim=True) / (N * (N - 1))) * off
    m = scores.detach() - scores.detach().max(-1, keepdim=True).values
    ex = torch.exp(m)
    col = C.sum(1)  # [B, N]
    out = torch.zeros(B, N)
    step = max(1, chunk_elems // (B * N * N))
    for s0 in range(0, S, step):
        y = rankings[s0:s0 + step]
        s = y.shape[0]
        Cy = C.expand(s, B, N, N).gather(2, y[..., None].expand(s, B, N, N))  # Cy[k, d] = C[y_k, d]
        A = Cy.cumsum(2) - Cy
        rew = fk[:, None] * (col[:, None, :] - A)  # [s, B, k, d]
        r = rew.gather(3, y[..., None]).squeeze(-1)
        G = r.flip(-1).cumsum(-1).flip(-1)
        Z = ex.expand(s, B, N).gather(-1, y).flip(-1).cumsum(-1).flip(-1)
        ranks = torch.empty_like(y).scatter_(-1, y, torch.arange(N).expand(s, B, N))
        upto = (torch.arange(N)[:, None] <= ranks[:, :, None, :]).float()  # k <= rank(d)
        pi = ex[:, None, :] / Z[..., None] * upto
        term = ((rew - G[..., None]) * pi).sum(2)
        G_next = torch.cat([G[..., 1:], torch.zeros(s, B, 1)], -1).gather(-1, ranks)
        out = out + (G_next + term).sum(0)
    return out / S


# ------------------------------------------------------------------------------------------ the cases
@dataclass
class Case:
    kind: str
    B: int
    N: int
    S: int
    plain: bool = True  # False: the plain code is too slow to repeat (dense [S, B, N, N] pairs): torchfair alone

    @property
    def label(self) -> str:
        return {"sample": "sampling only (rankings)",
                "exposure": "sampling + expected exposure (no grad)",
                "pl_rank": "exposure, PL-Rank fwd+bwd",
                "score_function": "exposure, score-function fwd+bwd",
                "dips": "DIPS (contract joint), no grad",
                "dips_sf": "DIPS, score-function fwd+bwd",
                "dips_pl_rank": "DIPS, PL-Rank fwd+bwd"}[self.kind]


def make_inputs(case: Case, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(case.B, case.N, generator=g)
    w = torch.rand(case.B, case.N, generator=g)
    rel = torch.randint(0, 5, (case.B, case.N), generator=g).float()
    groups = torch.randint(0, 2, (case.B, case.N), generator=g)
    return s, w, rel, groups


def implementations(case: Case, seed: int = 1):
    """(plain, torchfair): callables returning a dict of outputs to compare."""
    from torchfair.browsing import RBP
    from torchfair.metrics import dips
    from torchfair.orderings import PlackettLuce, sample_rankings

    s, w, rel, groups = make_inputs(case)
    B, N, S = case.B, case.N, case.S
    mask = torch.ones(B, N, dtype=torch.bool)
    fk = plain_fk(N)
    F = RBP(GAMMA)
    memb = torch.nn.functional.one_hot(groups, 2).float()
    W = _udp(rel) if case.kind.startswith("dips") else None
    est = {"pl_rank": "pl_rank", "dips_pl_rank": "pl_rank", "score_function": "score_function",
           "dips_sf": "score_function"}.get(case.kind, "pl_rank")
    grad = case.kind not in ("sample", "exposure", "dips")

    def gen():
        return torch.Generator().manual_seed(seed)

    def plain():
        x = s.clone().requires_grad_(case.kind in ("score_function", "dips_sf"))
        rk = plain_rankings(x, S, gen())
        if case.kind == "sample":
            return {"rankings": rk}
        if case.kind in ("exposure", "pl_rank"):
            e = plain_exposure(rk, fk)
            out = {"rankings": rk, "value": e}
            if case.kind == "pl_rank":
                out["grad"] = plain_pl_rank(x, rk, fk, w)
            return out
        if case.kind == "score_function":
            wts = plain_sf_weights(plain_log_prob(x, rk))  # [S, B]
            Sk, Bk, Nk = rk.shape
            e_s = torch.zeros(Sk, Bk, Nk).scatter_(-1, rk, fk.expand(Sk, Bk, Nk))
            e = (wts[..., None] * e_s).sum(0)
            (e * w).sum().backward()
            return {"rankings": rk, "value": e.detach(), "grad": x.grad}
        # DIPS
        if case.kind == "dips_sf":
            wts = plain_sf_weights(plain_log_prob(x, rk))
        else:
            wts = torch.full((S, B), 1.0 / S)
        M = plain_dips(plain_envy(rk, fk, W, memb, wts), memb, fk)
        out = {"rankings": rk, "value": M.detach()}
        if case.kind == "dips_sf":
            (M * DIPS_WEIGHT).sum().backward()
            out["grad"] = x.grad
        elif case.kind == "dips_pl_rank":
            # dL/denvy[i, h] = sum_g memb[i, g] dL/dS[g, h]; C[i, j] = sum_h g[i, h] memb[j, h] W[i, j]
            Sgh_w = torch.where(_dips_C(memb, fk) > 0, DIPS_WEIGHT / _dips_C(memb, fk).clamp(min=1e-30),
                                torch.zeros(()))
            genvy = torch.einsum("big,bgh->bih", memb, Sgh_w)
            C = torch.einsum("bih,bjh->bij", genvy, memb) * W
            out["grad"] = plain_pl_rank_pairs(x, rk, fk, C)
        return out

    def tf():
        x = s.clone().requires_grad_(grad)
        if case.kind == "sample":
            return {"rankings": sample_rankings(x, mask, S, gen())}
        # the plain code's policy softmax(x): the absolute temperature 1 (the default is relative to each list's std)
        ordering = PlackettLuce(samples=S, estimator=est, generator=gen(), temperature=1.0, scale="none")
        if case.kind in ("exposure", "pl_rank", "score_function"):
            ob = ordering(x, mask)
            e = ob.exposure(F)
            out = {"rankings": ob.rankings, "value": e.detach()}
            if grad:
                (e * w).sum().backward()
                out["grad"] = x.grad
            return out
        M = dips(x, rel, groups, num_groups=2, browsing=F, ordering=ordering, validate_args=False)
        out = {"value": M.detach()}
        if grad:
            (M * DIPS_WEIGHT).sum().backward()
            out["grad"] = x.grad
        return out

    return plain, tf


#: the DIPS objective differentiated: sum of M[g, h] * DIPS_WEIGHT[g, h] (the gap M[0, 1] - M[1, 0] plus a bit)
DIPS_WEIGHT = torch.tensor([[0.1, 1.0], [-1.0, 0.2]])


def _dips_C(memb, fk):
    sizes = memb.sum(1)
    cum = torch.cat([torch.zeros(1), fk.cumsum(0)])[sizes.long()]
    a = sizes[:, :, None] * cum[:, None, :]
    return torch.maximum(a, a.transpose(1, 2))


def check_equal(case: Case, a: dict, b: dict) -> str:
    """Compare the outputs; returns a short description (raises on a mismatch)."""
    notes = []
    if "rankings" in a and "rankings" in b:
        same = (a["rankings"] == b["rankings"]).all(-1).float().mean().item()
        if same < 0.99:
            raise AssertionError(f"{case}: only {same:.4f} of the sampled rankings are equal")
        notes.append("rankings equal" if same == 1.0 else f"rankings {same:.4%} equal")
    for key in ("value", "grad"):
        if key in a and key in b:
            x, y = a[key].double(), b[key].double()
            scale = y.abs().max().item() or 1.0
            err = (x - y).abs().max().item() / scale
            tol = 2e-4 if key == "value" else 5e-3
            if not err < tol:
                raise AssertionError(f"{case}: {key} differs by {err:.2e} (relative to its max)")
            notes.append(f"{key} {err:.0e}")
    return ", ".join(notes)


def time_case(case: Case, rounds: int):
    plain, tf = implementations(case)
    if not case.plain:
        tf()  # warm-up
        tt = []
        for _ in range(max(3, rounds // 3)):
            t0 = time.perf_counter()
            tf()
            tt.append(time.perf_counter() - t0)
        return {"case": case, "plain_s": None, "torchfair_s": statistics.median(tt), "ratio": None,
                "ratio_q": None, "check": "checked at the other shapes"}
    t0 = time.perf_counter()
    check = check_equal(case, plain(), tf())  # also the warm-up
    if time.perf_counter() - t0 > 4.0:  # slow plain code (dense pairs): fewer rounds
        rounds = min(rounds, 3)
    med, times = interleaved({"plain": plain, "torchfair": tf}, rounds, alternate=True, warmup=False)
    ratios = [a / b for a, b in zip(times["torchfair"], times["plain"])]
    return {"case": case, "plain_s": med["plain"], "torchfair_s": med["torchfair"],
            "ratio": ratio(times, "torchfair", "plain"), "ratio_q": (min(ratios), max(ratios)), "check": check,
            "rounds": rounds}


KINDS = ("sample", "exposure", "pl_rank", "score_function", "dips", "dips_sf", "dips_pl_rank")
#: DIPS at 64 x 500 with 100 samples: the plain dense code would hold 1.6e9 pair entries per call (tens of
#: seconds); torchfair is timed alone there (its numbers are checked at the two other shapes)
CASES: List[Case] = [Case(k, B, N, S, plain=not (S == 100 and N == 500 and k.startswith("dips")))
                     for (B, N, S) in ((256, 100, 100), (64, 500, 100), (64, 500, 4)) for k in KINDS]
QUICK: List[Case] = [Case(k, 16, 20, 8) for k in ("sample", "exposure", "pl_rank", "score_function", "dips",
                                                  "dips_sf", "dips_pl_rank")]


def table(results, header: str) -> str:
    lines = [header, "", "| case | B x N | samples | plain (s) | torchfair (s) | torchfair / plain (median of rounds) "
             "| min-max ratio | checked |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        c = r["case"]
        if r["ratio"] is None:
            lines.append(f"| {c.label} | {c.B} x {c.N} | {c.S} | - | {r['torchfair_s']:.4f} | - | - | {r['check']} |")
            continue
        lines.append(f"| {c.label} | {c.B} x {c.N} | {c.S} | {r['plain_s']:.4f} | {r['torchfair_s']:.4f} | "
                     f"{r['ratio']:.2f} | {r['ratio_q'][0]:.2f}-{r['ratio_q'][1]:.2f} | {r['check']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plackett-Luce: torchfair against plain Gumbel-sort PyTorch code "
                                             "(same numbers, interleaved timing)",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15, help="timing rounds per case (each runs both once)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (torch.set_num_threads)")
    ap.add_argument("--only", type=str, default=None,
                    help="comma-separated case kinds (sample, exposure, pl_rank, score_function, dips, dips_sf, "
                         "dips_pl_rank); unset: all")
    ap.add_argument("--shapes", type=str, default=None, help="comma-separated BxNxS shapes, e.g. 256x100x100 "
                                                              "(unset: 256x100x100, 64x500x100, 64x500x4)")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny shapes, 2 rounds, no file written")
    ap.add_argument("--out", type=str,
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "bench_pl.md"),
                    help="Markdown file to write (not with --quick)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    cases = QUICK if a.quick else CASES
    if a.shapes:
        shapes = [tuple(int(v) for v in sh.split("x")) for sh in a.shapes.split(",")]
        cases = [Case(k, B, N, S, plain=not (S * N >= 50_000 and k.startswith("dips"))) for (B, N, S) in shapes
                 for k in KINDS]
    if a.only:
        kinds = set(a.only.split(","))
        cases = [c for c in cases if c.kind in kinds]
    rounds = 2 if a.quick else a.rounds
    results = []
    for c in cases:
        res = time_case(c, rounds)
        results.append(res)
        print(f"  {c.label} {c.B}x{c.N} S={c.S}: plain {res['plain_s']} s, torchfair {res['torchfair_s']:.4f} s, "
              f"ratio {res['ratio']} ({res['check']})", file=sys.stderr)
    header = (f"Plackett-Luce, torchfair vs plain PyTorch (experiments/bench_pl.py): fp32, CPU "
              f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__}, "
              f"{a.threads} thread(s); {rounds} interleaved rounds per case (3 where the plain code takes seconds); "
              f"ratio = median over the rounds of torchfair / plain; times are medians.  RBP(0.9) browsing; "
              f"DIPS with 2 groups, relevance in {{0..4}}.")
    text = table(results, header)
    print(text)
    if not a.quick and a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return results


if __name__ == "__main__":
    main()
