"""tests/test_ab_cpu.py: flashtune.ab (python -m flashtune.ab) through a fake flashtune binary: the rounds' order, the
validation-off copy of later rounds, one database per round, the comparisons against the first folder and the table
of ratios; --vary (a tunable's values over one folder, matched without the tunable); bad input (a missing folder, a
failing run, a YAML without a name, a bad --vary) as one line."""
import json
import os
import re
import tempfile
import textwrap
import unittest

from flashtune import ab

from tests.capture import run_main

# The fake keeps a "database" as JSON: a list of runs (experiment text's validate line, templates folder, median ms
# read from the folder's file `ms`, SM clock from its file `mhz`, 1700 without). `query trials RUN --format csv` prints
# the run's two trials (problems batch=1 and 2, times x 1 and x 2) at its experiment's `knob` (1 if none), times x (1 +
# (knob - 1) / 10); none for a folder with a file `reused` (its kernels already in the database).
FAKE = textwrap.dedent("""\
    #!/usr/bin/env python3
    import csv, json, os, re, sys
    args = sys.argv[1:]
    db = args[args.index("--db") + 1]
    runs = json.load(open(db)) if os.path.exists(db) else []
    if args[0] == "run":
        folder = args[args.index("--templates") + 1]
        text = open(args[1]).read()
        if os.path.exists(os.path.join(folder, "fail")):
            print("trial crashed", file=sys.stderr); sys.exit(3)
        mhz = os.path.join(folder, "mhz")
        runs.append({"folder": folder, "validate_off": "validate: {enabled: false}" in text,
                     "ms": float(open(os.path.join(folder, "ms")).read()), "text": text,
                     "mhz": float(open(mhz).read()) if os.path.exists(mhz) else 1700,
                     "reused": os.path.exists(os.path.join(folder, "reused"))})
        json.dump(runs, open(db, "w"))
        open(db + ".order", "a").write(os.path.basename(folder) + "\\n")
    elif args[:2] == ["query", "runs"]:
        print("id,started,experiment")
        for i, r in enumerate(runs):
            print(f"{i + 1},t,x")
    elif args[:2] == ["query", "trials"]:
        r = runs[int(args[2]) - 1]
        m = re.search(r"knob: (\\d+)", r["text"])
        knob = int(m.group(1)) if m else 1
        w = csv.writer(sys.stdout)
        w.writerow(["id", "family", "stage", "problem", "config", "status", "median_ms", "sm_mhz"])
        for p, scale in (("batch=1,seq=64", 1.0), ("batch=2,seq=64", 2.0)) if not r["reused"] else ():
            w.writerow([1, "fam", "stage", p, f"block_m=64,knob={knob}", "ok", r["ms"] * scale * (1 + (knob - 1) / 10),
                        r["mhz"]])
    """)


class AbCpu(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.ft = os.path.join(self.d, "flashtune")
        with open(self.ft, "w") as f:
            f.write(FAKE)
        os.chmod(self.ft, 0o755)
        self.exp = os.path.join(self.d, "x.yaml")
        with open(self.exp, "w") as f:
            f.write("# an experiment\nname: x\nstudies: []\n")
        self.folders = []
        for name, ms, mhz in (("tA", 2.0, 1700), ("tB", 1.9, 1785), ("tC", 2.2, None)):
            d = os.path.join(self.d, name)
            os.makedirs(d)
            with open(os.path.join(d, "ms"), "w") as f:
                f.write(str(ms))
            if mhz:
                with open(os.path.join(d, "mhz"), "w") as f:
                    f.write(str(mhz))
            self.folders.append(d)

    def tearDown(self):
        self.tmp.cleanup()

    def main(self, argv):
        return run_main(ab.main, argv)

    def test_rounds_alternate_and_later_rounds_do_not_validate(self):
        out = os.path.join(self.d, "out")
        rc, stdout, err = self.main(["run", "--rounds", "3", "--flashtune", self.ft, "--out", out, self.exp]
                                    + self.folders)
        self.assertEqual(rc, 0, err)
        for r, order in ((1, "tA tB tC"), (2, "tC tB tA"), (3, "tA tB tC")):
            db = os.path.join(out, f"ab_r{r}.sqlite")
            with open(db + ".order") as f:
                self.assertEqual(f.read().split(), order.split())
            with open(db) as f:
                runs = json.load(f)
            self.assertEqual([x["validate_off"] for x in runs], [r > 1] * 3)
        # the table: folder 1 at 0.95 of folder 0 and folder 2 at 1.1 in every round, both problems; folder 1 at a
        # 5 % higher clock (1785 / 1700 MHz): its cycles 0.95 x 1.05 = 0.9975 (printed 0.997) of folder 0's
        self.assertIn("== folder 1 / folder 0, 3 rounds", stdout)
        self.assertEqual(stdout.count("0.9500  0.950 / 0.950 / 0.950"), 2)
        self.assertIn("ms  clock 1.050  cycles 0.997  fam  batch=2,seq=64  block_m=64,knob=1", stdout)
        self.assertIn("1.1000  1.100 / 1.100 / 1.100", stdout)
        self.assertIn("ms  clock 1.000  cycles 1.100  fam", stdout)
        self.assertEqual(stdout.count("batch=2,seq=64"), 2)
        self.assertTrue(os.path.exists(os.path.join(out, "ab.txt")))
        rc, again, _ = self.main(["table", out])
        self.assertEqual((rc, again), (0, stdout))

    def test_vary_runs_a_tunables_values_over_one_folder(self):
        with open(self.exp, "w") as f:
            f.write("name: x\nstudies:\n  - family: fam\n    space: {block_m: [64, 128], knob: 1}  # tuned\n")
        out = os.path.join(self.d, "out")
        rc, stdout, err = self.main(["run", "--rounds", "2", "--vary", "knob=1,3", "--flashtune", self.ft, "--out", out,
                                     self.exp, self.folders[0]])
        self.assertEqual(rc, 0, err)
        with open(os.path.join(out, "ab_r2.sqlite")) as f:
            runs = json.load(f)
        self.assertEqual([re.search(r"knob: (\d+)", x["text"]).group(1) for x in runs], ["3", "1"])  # reversed
        self.assertEqual([x["validate_off"] for x in runs], [True, True])
        self.assertIn("space: {block_m: [64, 128], knob: 3}  # tuned", runs[0]["text"])
        # matched without the tunable: 1.2 of knob=1 on both problems, every round
        self.assertIn("== knob=3 / knob=1, 2 rounds (< 1: knob=3 faster)", stdout)
        self.assertEqual(stdout.count("1.2000  1.200 / 1.200"), 2)
        self.assertIn("ms  clock 1.000  cycles 1.200  fam  batch=2,seq=64  block_m=64\n", stdout + "\n")
        rc, again, _ = self.main(["table", out])
        self.assertEqual((rc, again), (0, stdout))

    def test_with_tunable_replaces_or_adds_in_every_space(self):
        text = "name: x\n  space: {a: 1, knob: [1, 2], b: {c: 3}}\n  space: {a: 2}\n"
        self.assertEqual(ab.with_tunable(text, "knob", "4"),
                         "name: x\n  space: {a: 1, b: {c: 3}, knob: 4}\n  space: {a: 2, knob: 4}\n")
        with self.assertRaises(ValueError):
            ab.with_tunable("name: x\nstudies: []\n", "knob", "2")
        with self.assertRaises(ValueError):
            ab.with_tunable("name: x\n  space:\n    knob: 1\n", "knob", "2")
        self.assertEqual(ab.parse_vary("knob=1, 2"), ("knob", ["1", "2"]))
        for bad in ("knob", "knob=1", "knob=1,1", "=1,2", "k-nob=1,2"):
            with self.assertRaises(ValueError):
                ab.parse_vary(bad)

    def test_the_mean_is_geometric_over_rounds(self):
        out = os.path.join(self.d, "out")
        os.makedirs(out)
        with open(os.path.join(out, "ab_runs.csv"), "w") as f:
            f.write("round,folder,run\n1,0,1\n1,1,2\n2,1,1\n2,0,2\n")
        for r, b in ((1, 0.5), (2, 2.0)):
            with open(os.path.join(out, f"cmp_r{r}_1.csv"), "w") as f:
                f.write("family,stage,problem,config,a_median_ms,a_noise,b_median_ms,b_noise,diff,verdict\n"
                        f"fam,stage,p,c,1.0,0,{b},0,x,same\n")
        lines = ab.table(out)
        self.assertTrue(lines[1].startswith("1.0000  0.500 / 2.000"), lines)  # not the arithmetic 1.25
        # a round where the variant's trial has no time (failed): "-", the mean over the other rounds
        with open(os.path.join(out, "cmp_r2_1.csv"), "w") as f:
            f.write("family,stage,problem,config,a_median_ms,a_noise,b_median_ms,b_noise,diff,verdict\n"
                    "fam,stage,p,c,1.0,0,,,,not comparable\n")
        lines = ab.table(out)
        self.assertTrue(lines[1].startswith("0.5000  0.500 / -"), lines)
        self.assertNotIn("clock", lines[1])  # compare CSVs of before session 43 carry no clocks
        # with clocks: their ratio and the cycles' (time x clock), geometric over the rounds with a time
        for r, (b, mhz) in ((1, (0.5, 1800)), (2, (2.0, 2400))):
            with open(os.path.join(out, f"cmp_r{r}_1.csv"), "w") as f:
                f.write("family,stage,problem,config,a_median_ms,a_sm_mhz,b_median_ms,b_sm_mhz\n"
                        f"fam,stage,p,c,1.0,1200,{b},{mhz}\n")
        lines = ab.table(out)
        self.assertIn("1.0000  0.500 / 2.000     1.0000 ms  clock 1.732  cycles 1.732  fam  p  c", lines[1])

    def test_validation_line_is_replaced_or_added(self):
        self.assertEqual(ab.without_validation("name: x\nvalidate: {enabled: true}\n"),
                         "name: x\nvalidate: {enabled: false}\n")
        self.assertEqual(ab.without_validation("# c\nname: x\nmeasure: {}\n"),
                         "# c\nname: x\nvalidate: {enabled: false}\nmeasure: {}\n")
        with self.assertRaises(ValueError):
            ab.without_validation("studies: []\n")

    def test_bad_input_is_one_line(self):
        out = os.path.join(self.d, "out")
        rc, _, err = self.main(["run", "--flashtune", self.ft, "--out", out, self.exp, self.folders[0],
                                os.path.join(self.d, "nowhere")])
        self.assertEqual(rc, 2)
        self.assertIn("no such templates folder", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        open(os.path.join(self.folders[1], "fail"), "w").close()
        rc, _, err = self.main(["run", "--flashtune", self.ft, "--out", out, self.exp] + self.folders[:2])
        self.assertEqual(rc, 2)
        self.assertIn("round 1, folder", err)
        self.assertIn("flashtune run failed (rc 3", err)
        rc, _, err = self.main(["run", "--flashtune", self.ft, "--out", out, self.exp, self.folders[0]])
        self.assertEqual(rc, 2)
        self.assertIn("two template folders", err)
        os.remove(os.path.join(self.folders[1], "fail"))
        open(os.path.join(self.folders[1], "reused"), "w").close()
        rc, _, err = self.main(["run", "--flashtune", self.ft, "--out", out, self.exp] + self.folders[:2])
        self.assertEqual(rc, 2)
        self.assertIn("has no trials (it compiled the same kernels as run ", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        rc, _, err = self.main(["run", "--vary", "knob=1,2", "--flashtune", self.ft, "--out", out, self.exp]
                               + self.folders[:2])
        self.assertEqual(rc, 2)
        self.assertIn("--vary takes one template folder", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        rc, _, err = self.main(["run", "--vary", "knob=1", "--flashtune", self.ft, "--out", out, self.exp,
                                self.folders[0]])
        self.assertEqual(rc, 2)
        self.assertIn("expected NAME=V0,V1", err)
        with open(self.exp, "w") as f:
            f.write("studies: []\n")
        rc, _, err = self.main(["run", "--flashtune", self.ft, "--out", out, self.exp] + self.folders[:2])
        self.assertEqual(rc, 2)
        self.assertIn("no top-level 'name:' line", err)


if __name__ == "__main__":
    unittest.main()
