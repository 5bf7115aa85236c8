#!/usr/bin/env bash
# tools/multi_gpu_bench.sh: on a machine with two or more GPUs (after tools/gpu_pack.sh, from the repository
# root): each experiment given (default: the quick-start) run once on GPU 0 alone and once with
# --devices 0,1,..., each from an empty compile cache into a fresh database. Prints per experiment: wall
# times [s], the speed-up, trials per GPU, the NVRTC time each run spent compiling (sum over its compiles,
# [s], spread over the compile threads) and whether both runs recorded the same resume keys.
# usage: bash tools/multi_gpu_bench.sh [EXPERIMENT.yaml ...]; FT_BENCH_DEVICES=0,1 (default: every GPU)
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="$(pwd)/.gpu/bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
ft=.gpu/bin/flashtune
[ -x "$ft" ] || ft=build/harness/cli/flashtune
n=$(nvidia-smi -L | wc -l)
[ "$n" -ge 2 ] || { echo "multi_gpu_bench: needs two GPUs, $n found" >&2; exit 1; }
devices=${FT_BENCH_DEVICES:-$(seq -s, 0 $((n - 1)))}
work=$(mktemp -d)
experiments=("$@")
[ ${#experiments[@]} -gt 0 ] || experiments=(experiments/quickstart.yaml)
keys="SELECT t.experiment_name, t.stage, t.family, p.key, c.key, t.source_hash, t.device_key, t.status FROM trials t
      JOIN problems p ON p.id = t.problem_id JOIN configs c ON c.id = t.config_id ORDER BY 1, 2, 3, 4, 5, 6, 7"
nvrtc="SELECT printf('%.1f', coalesce(sum(compile_ms), 0) / 1000.0) FROM compiles"
for e in "${experiments[@]}"; do
  name=$(basename "$e" .yaml)
  t0=$(date +%s.%N)
  "$ft" run "$e" --device 0 --cache "$work/$name.c1" --db "$work/$name.1.sqlite" >"$work/$name.1.log" 2>&1 ||
    echo "$name: one-GPU run failed (exit $?)"
  t1=$(date +%s.%N)
  "$ft" run "$e" --devices "$devices" --cache "$work/$name.cn" --db "$work/$name.n.sqlite" >"$work/$name.n.log" 2>&1 ||
    echo "$name: --devices $devices run failed (exit $?)"
  t2=$(date +%s.%N)
  same=no
  cmp -s <("$ft" query sql "$keys" --format csv --db "$work/$name.1.sqlite") \
         <("$ft" query sql "$keys" --format csv --db "$work/$name.n.sqlite") && same=yes
  awk -v a="$t0" -v b="$t1" -v c="$t2" -v n="$name" -v d="$devices" -v s="$same" 'BEGIN {
    printf "== %s: one GPU %.1f s, --devices %s %.1f s, speed-up %.2fx; same resume keys: %s\n", n, b - a, d, c - b,
           (b - a) / (c - b), s }'
  echo "   NVRTC time: one GPU $("$ft" query sql "$nvrtc" --format csv --db "$work/$name.1.sqlite" | tail -1) s," \
       "--devices $("$ft" query sql "$nvrtc" --format csv --db "$work/$name.n.sqlite" | tail -1) s"
  # Where each run's wall time went: start to its first trial (CUDA context, bandwidth probe, first inputs,
  # reference and compile), its trials, its end; timed_s: the samples' GPU time (n_samples x median);
  # problem_s: the gaps before each new problem's first trial (inputs and the double reference, per worker).
  for db in "$work/$name.1.sqlite" "$work/$name.n.sqlite"; do
    "$ft" query sql "WITH t AS (SELECT run_id, problem_id, created_at, n_samples, median_ms, status,
                       lag(created_at) OVER (PARTITION BY run_id ORDER BY id) AS prev,
                       lag(problem_id) OVER (PARTITION BY run_id ORDER BY id) AS prev_problem FROM trials)
                     SELECT r.id AS run, substr(r.gpu_uuid, 1, 12) AS gpu, count(*) AS trials, sum(t.status = 'ok') AS ok,
                       printf('%.1f', (julianday(min(t.created_at)) - julianday(r.started_at)) * 86400) AS to_first_s,
                       printf('%.1f', (julianday(max(t.created_at)) - julianday(min(t.created_at))) * 86400) AS trials_s,
                       printf('%.1f', (julianday(r.finished_at) - julianday(max(t.created_at))) * 86400) AS end_s,
                       printf('%.1f', sum(coalesce(t.n_samples * t.median_ms, 0)) / 1000.0) AS timed_s,
                       printf('%.1f', sum(CASE WHEN t.prev_problem <> t.problem_id
                         THEN (julianday(t.created_at) - julianday(t.prev)) * 86400 ELSE 0 END)) AS problem_s
                     FROM t JOIN runs r ON r.id = t.run_id GROUP BY r.id" --db "$db"
  done
  "$ft" query best --db "$work/$name.1.sqlite" | head -12
done
rm -rf "$work"
