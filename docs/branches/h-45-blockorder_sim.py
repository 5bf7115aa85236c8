"""docs/branches/h-45-blockorder_sim.py: the block-order simulation of NOTES session 45 (python3 FILE; no GPU, no deps).

List scheduling of attn_bwd_fused mma 91 blocks in launch order (sections of unit_group pairs, key block 0 first),
a block = items + F, the host tail plan, SM speeds and block times jittered; prints makespan over the ideal."""
import heapq, random, statistics
def tail_parts(blocks, slots, maxb=144, maxp=3):
    r = blocks % slots
    if r == 0 or r > maxb: return 1
    best, bc = 1, 1.0
    for k in range(2, maxp+1):
        c = ((k*r + slots - 1)//slots) * (1.0/k + 0.04)
        if c < bc: best, bc = k, c
    return best
def order(work, ug):
    out=[]
    for s0 in range(0, len(work), ug):
        sec = range(s0, min(len(work), s0+ug))
        for j in range(len(work[0])):
            for p in sec: out.append(work[p][j])
    return out
def run(ws, tail, F, rng, sms=132, jit_sm=0.02, jit_blk=0.03, combine=1.0):
    n=len(ws); parts = tail_parts(n, sms) if tail==2 else 1
    full = n - (n % sms) if parts>1 else n
    jobs=[w+F for w in ws[:full]]
    if parts>1:
        for j in range(parts):
            for w in ws[full:]:
                a=w*j//parts; b=w*(j+1)//parts
                jobs.append((b-a)+F+combine)
    speed=[1+rng.uniform(-jit_sm,jit_sm) for _ in range(sms)]
    h=[(0.0,i) for i in range(sms)]
    for d in jobs:
        t,i=heapq.heappop(h); heapq.heappush(h,(t+d*speed[i]*(1+rng.uniform(-jit_blk,jit_blk)),i))
    ideal=(sum(ws)+F*n)/sms
    return max(t for t,_ in h)/ideal-1, parts
def work(pairs,nkb,per): return [[per(j) for j in range(nkb)] for _ in range(pairs)]
shapes={"d128 causal b2h16":work(32,64,lambda j:128-2*j),"llama 32/8":work(8,64,lambda j:4*(128-2*j)),
        "d64 b2h32 causal":work(64,64,lambda j:128-2*j),"d128 nc bm80":work(32,64,lambda j:103)}
for name,w in shapes.items():
    for F in (3.3,):
        row=[]
        for ug in (1,2,4,8):
            for tail in (1,2):
                rng=random.Random(1)
                vals=[run(order(w,ug),tail,F,rng) for _ in range(20)]
                row.append(f"ug{ug}/t{tail}(p{vals[0][1]}) {100*statistics.mean(v for v,_ in vals):5.2f}%")
        print(f"{name:18} F={F}: "+"  ".join(row))
