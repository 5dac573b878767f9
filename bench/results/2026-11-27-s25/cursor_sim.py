import json, sys, statistics
sys.path.insert(0, "/work/main")
import numpy as np
from core.suffix import ContextLookup, Lookup, MAX_MATCH

GAP = int(sys.argv[1]) if len(sys.argv) > 1 else 64

class Cursor(ContextLookup):
    def __init__(self, context, memory=None):
        super().__init__(context, memory)
        self.cursor = None; self.cand = None
    def extend(self, tokens):
        toks = self.index.tokens
        for i, t in enumerate(tokens):
            if self.cand is not None and i == 0 and self.cand + 1 < len(self.index) and toks[self.cand + 1] == t:
                self.cursor = self.cand + 1
            elif self.cursor is not None and self.cursor + 1 < len(self.index) + i and \
                    np.concatenate([toks, tokens[:i]])[self.cursor + 1] == t:
                self.cursor += 1
        self.cand = None
        super().extend(tokens)
    def propose(self, max_len, pending=(), score=None):
        tail = (self.index.tokens[-MAX_MATCH:].tolist() + list(pending))[-MAX_MATCH:]
        idx = self.index
        m, ends = idx.match(tail)
        if not m:
            return Lookup()
        ends = ends[ends + 1 < idx.n]
        if self.cursor is not None:
            near = ends[(ends > self.cursor) & (ends <= self.cursor + GAP)]
            if len(near):
                e = int(near[0]); self.cand = e
                return idx._copy(Lookup(match=m), e, m, max_len, 1.0)
        found = idx.walk(ends, m, max_len)
        if len(ends): self.cand = int(ends[-1])
        return found

def simulate(cls, prompt, out, L=31):
    lk = cls(prompt)
    t, rounds, got = 0, 0, 0
    while t < len(out):
        p = lk.propose(L)
        a = 0
        while a < len(p.tokens) and t + a < len(out) and p.tokens[a] == out[t + a]:
            a += 1
        step = min(a + 1, len(out) - t)
        lk.extend(out[t:t + step]); t += step; rounds += 1; got += a
    return rounds

data = json.load(open("/tmp/copy_ids.json"))
by = {}
for d in data:
    r0, r1 = simulate(ContextLookup, d["prompt"], d["out"]), simulate(Cursor, d["prompt"], d["out"])
    by.setdefault(d["category"], []).append(r0 / r1)
    print(d["category"], len(d["out"]), "rounds", r0, r1, round(r0 / r1, 2))
print({c: round(statistics.median(v), 2) for c, v in by.items()})
