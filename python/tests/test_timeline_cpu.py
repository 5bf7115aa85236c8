"""tests/test_timeline_cpu.py: flashtune.timeline on hand-made records (no GPU): each phase per block, the gaps between
blocks on one SM, the fixed cost and its share, the SM clock from the globaltimer stamps, and one-line errors for
files it cannot read."""
import os
import tempfile
import textwrap
import unittest

from flashtune import timeline

from tests.capture import run_main

# SM 0 runs A then B, SM 1 runs C (one item: no phases). A: 4 items, steady 300 cycles, ends at 1800 (its writer),
# B enters 200 cycles later; B: 2 items, ends at its store (2850). The clock: 1700 cycles per microsecond throughout.
RECORDS = textwrap.dedent("""\
    # block_m=80,mma=91 | batch=1,heads_q=2
    block,sm,items,gt_entry,entry,kv,first,last,stored,writer,last1,gt_stored
    0,0,4,10000,0,100,600,1500,1700,1800,1400,11000
    1,1,1,10000,5,60,400,400,515,500,390,10300
    2,0,2,20000,2000,2050,2450,2750,2850,2800,0,20500
""")


def _write(text):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "timeline_0.csv")
    with open(path, "w") as f:
        f.write(text)
    return path


class TimelineTest(unittest.TestCase):
    def test_phases_per_block(self):
        _, rows = timeline.read(_write(RECORDS))
        p = timeline.phases(rows)
        self.assertEqual(p["kv"], [100, 50])
        self.assertEqual(p["first"], [500, 400])
        self.assertEqual(p["steady"], [300, 300])
        self.assertEqual(p["epilogue"], [200, 100])
        self.assertEqual(p["writer"], [100, 0])
        self.assertEqual(p["lead"], [100])  # B has no warpgroup 1 stamp
        self.assertEqual(p["gap"], [200])  # only A is followed on its SM
        self.assertEqual(p["fixed"], [1800 - 4 * 300 + 200, 850 - 2 * 300])
        self.assertAlmostEqual(timeline.mhz(rows), 1700.0)

    def test_summary_table(self):
        rc, out, err = run_main(timeline.main, ["summary", _write(RECORDS)])
        self.assertEqual(rc, 0, err)
        self.assertIn("block_m=80,mma=91 | batch=1,heads_q=2", out)
        self.assertIn("3 blocks on 2 SMs (1.5 a SM), SM clock 1700 MHz", out)
        fixed = next(line for line in out.splitlines() if line.startswith("fixed cost F"))
        self.assertEqual(fixed.split()[-4:], ["525", "525", "0.309", "2"])  # median, mean [cycles], us, blocks
        self.assertIn("fixed costs: 36.8 % of the blocks' time and gaps", out)

    def test_bad_files_get_one_line(self):
        for text, why in [("block,sm\n1,2\n", "the header is not"),
                          (RECORDS.replace("0,0,4,", "0,x,4,"), "record line 2 is not 12 integers"),
                          ("# title only\nblock,sm,items,gt_entry,entry,kv,first,last,stored,writer,last1,gt_stored\n", "no records")]:
            rc, out, err = run_main(timeline.main, ["summary", _write(text)])
            self.assertEqual(rc, 2)
            self.assertEqual(out, "")
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn(why, err)
        rc, _, err = run_main(timeline.main, ["summary", "/nonexistent/timeline.csv"])
        self.assertEqual(rc, 2)
        self.assertIn("/nonexistent/timeline.csv", err)


if __name__ == "__main__":
    unittest.main()
