#!/usr/bin/env python3
"""Distribution of an episode JSONL file (`compactrl rollout --out`): success,
compactions (quartiles, histogram), the compaction boundaries the first-found
asked fact crosses (from the first summary whose audit counts an asked fact as
seen to the answer), turns and tokens. docs/results.md, section 9.

usage: python3 docs/episode_dist.py FILE.jsonl"""
import json, sys, statistics as st
def q(xs, p):
    xs = sorted(xs)
    if not xs: return float('nan')
    k = (len(xs)-1)*p; f = int(k); c = min(f+1, len(xs)-1)
    return xs[f] + (xs[c]-xs[f])*(k-f)
path = sys.argv[1]
eps = [json.loads(l) for l in open(path)]
comp, turns, toks, new, succ, cross, ends, sampled = [], [], [], [], [], [], {}, []
for e in eps:
    m = e['metrics']; c = int(m.get('compactions', 0))
    comp.append(c); turns.append(m['turns']); succ.append(e['reward'] >= 1)
    sampled.append(m.get('sampled_tokens', 0))
    segs = e['segments']
    toks.append(sum(len(s['prompt_ids'])+len(s['response_ids']) for s in segs))
    new.append(len(segs[0]['prompt_ids']) + sum(len(s['response_ids']) for s in segs))
    ends[e['meta'].get('end_reason')] = ends.get(e['meta'].get('end_reason'), 0)+1
    # first summary index at which some asked fact had been seen
    first = None
    for i in range(1, c+1):
        if e['meta'].get(f'summary_{i}_kept') or e['meta'].get(f'summary_{i}_lost'):
            first = i; break
    cross.append(c - first + 1 if first else 0)
n = len(eps)
def line(name, xs):
    return f"{name}: min {min(xs)} q1 {q(xs,.25):g} median {q(xs,.5):g} q3 {q(xs,.75):g} max {max(xs)} mean {st.mean(xs):.2f}"
print(f"{path}: {n} episodes, success {sum(succ)/n:.3f} ({sum(succ)}/{n}), end reasons {ends}")
print(line("compactions", comp))
hist = {}
for c in comp: hist[c] = hist.get(c, 0)+1
print("histogram:", " ".join(f"{k}:{hist[k]}" for k in sorted(hist)))
print(line("boundaries crossed by the first-found asked fact", cross))
print("  share crossing >= 5:", f"{sum(1 for x in cross if x>=5)/n:.3f}")
print(line("turns", turns))
print(line("tokens (all segments' prompt+response)", toks))
print(line("tokens (task + every response/observation, once)", new))
print(line("sampled tokens", sampled))
