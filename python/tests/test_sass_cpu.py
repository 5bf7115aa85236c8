"""tests/test_sass_cpu.py: flashtune.sass on canned nvdisasm listings, a fake nvdisasm and fake flashtune builds
(no GPU, no CUDA toolkit): the hot loop's counts, the cache entry's resources and warnings, the comparison's
regressions and exit codes, and one-line errors; `profile` on canned ncu source pages (tools/gpu_profile.sh's
NAME.sass.csv)."""
import json
import os
import stat
import tempfile
import textwrap
import unittest

from flashtune import sass

from tests.capture import run_main

# Two loops: .L_x_1 (2 HGMMA, one spill reload, 9 instructions with its branch) inside the kernel, .L_x_3 (no MMA).
LISTING = textwrap.dedent("""\
            /*0000*/                   MOV R1, c[0x0][0x28] ;
        .L_x_1:
            /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R6+UR60], R7 ;
            /*0020*/                   UIADD3 UR12, UR9, 0x2, URZ ;
            /*0030*/                   HGMMA.64x64x16.F32.BF16 R184, gdesc[UR12], RZ, !UPT ;
            /*0040*/                   LDL R18, [R1] ;
            /*0050*/                   HGMMA.64x64x16.F32.BF16 R184, gdesc[UR12], R184, gsb0 ;
            /*0060*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
            /*0070*/                   FMUL R2, R2, R3 ;
            /*0080*/                   ISETP.GE.AND P1, PT, R2, R3, PT ;
            /*0090*/               @P1 BRA `(.L_x_1) ;
        .L_x_3:
            /*00a0*/                   IADD3 R4, R4, 0x1, RZ ;
            /*00b0*/                   STL [R1], R4 ;
            /*00c0*/              @!P0 BRA P1, `(.L_x_3) ;
            /*00d0*/                   @P2 BRA `(.L_x_9) ;
            /*00e0*/                   EXIT ;
        .L_x_9:
            /*00f0*/                   BRA `(.L_x_9);
""")


def _executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def _entry(folder, key, name, registers, spills, log, listing_marker):
    """A cache entry <key>.json + <key>.cubin; the fake nvdisasm prints the listing file named in the cubin."""
    with open(os.path.join(folder, key + ".json"), "w") as f:
        json.dump({"ok": True, "name_expression": name, "lowered_name": "_Z" + key, "log": log,
                   "resources": {"registers": registers, "spill_load_bytes": spills}}, f)
    with open(os.path.join(folder, key + ".cubin"), "w") as f:
        f.write(listing_marker)


class HotLoop(unittest.TestCase):
    def test_the_loop_with_the_most_mma_and_its_spills(self):
        loop = sass.hot_loop(LISTING)
        self.assertEqual((loop.instructions, loop.mma, loop.spill_instructions), (9, 2, 1))

    def test_every_instruction_counted_labels_not(self):
        ops = [o for _, o, _ in sass.opcodes(LISTING) if o]
        self.assertEqual(len(ops), 16)
        self.assertEqual(ops.count("BRA"), 4)
        self.assertIn("HGMMA", ops)

    def test_a_retry_block_branching_back_is_not_the_loop(self):
        # ptxas puts an mbarrier wait's retry out of line, after the loop, branching back into it: that span holds
        # the same HGMMAs and more; the hot loop is the innermost one.
        listing = textwrap.dedent("""\
            .L_x_1:
                /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R6+UR60], R7 ;
                /*0015*/              @!P0 BRA `(.L_x_7) ;
            .L_x_5:
                /*0020*/                   HGMMA.64x64x16.F32.BF16 R184, gdesc[UR12], RZ, !UPT ;
                /*0030*/                   FMUL R2, R2, R3 ;
                /*0040*/               @P1 BRA `(.L_x_1) ;
                /*0050*/                   EXIT ;
            .L_x_7:
                /*0060*/                   NOP ;
                /*0070*/                   LDL R18, [R1] ;
                /*0080*/                   BRA `(.L_x_5) ;
            """)
        self.assertEqual(sass.hot_loop(listing), sass.Loop(5, 1, 0))

    def test_no_mma_loop_gives_an_empty_loop(self):
        self.assertEqual(sass.hot_loop(LISTING.replace("HGMMA", "FFMA")), sass.Loop())


class Comparison(unittest.TestCase):
    def k(self, loop_spills=0, spills=0, warnings="", sass_n=100):
        return sass.KernelStats("k<1>", 168, spills, warnings, sass_n, sass.Loop(50, 4, loop_spills))

    def test_worse_names_each_regression(self):
        self.assertEqual(sass.worse(self.k(), self.k(sass_n=90)), [])
        w = sass.worse(self.k(1, 8, "C7512"), self.k(3, 16, "C7511 C7512"))
        self.assertEqual(w, ["loop spill instructions 1 -> 3", "spill loads 8 -> 16 B", "new C7511"])

    def test_report_sums_families_and_counts_the_worse(self):
        base = {"a<1>": self.k(), "a<2>": self.k(), "b<1>": self.k(), "only_base<1>": self.k()}
        new = {"a<1>": self.k(sass_n=80), "a<2>": self.k(loop_spills=2), "b<1>": self.k()}
        lines, n = sass.compare_report(base, new)
        self.assertEqual(n, 1)
        fam_a = next(l for l in lines if l.startswith("a "))
        self.assertIn("200 ->      180", fam_a)
        self.assertTrue(any("a<2>: loop spill instructions 0 -> 2" in l for l in lines))
        self.assertTrue(any("1 kernels in one build only" in l for l in lines))


class FakeToolchain(unittest.TestCase):
    """stats and compare end to end through a fake nvdisasm (prints the listing the cubin names)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        with open(os.path.join(self.d, "loop.sass"), "w") as f:
            f.write(LISTING)
        with open(os.path.join(self.d, "clean.sass"), "w") as f:
            f.write(LISTING.replace("LDL R18, [R1]", "FADD R18, R18, R18"))
        # nvdisasm -c CUBIN: the cubin holds the name of its listing
        self.nvdisasm = _executable(os.path.join(self.d, "nvdisasm"),
                                    f'#!/bin/sh\ncat "{self.d}/$(cat "$2")"\n')

    def tearDown(self):
        self.tmp.cleanup()

    def run_main(self, argv):
        return run_main(sass.main, ["--nvdisasm", self.nvdisasm, "--jobs", "2"] + argv)

    def test_stats_reads_resources_warnings_and_the_listing(self):
        cache = os.path.join(self.d, "cache")
        os.makedirs(cache)
        _entry(cache, "k1", "attn<1>", 168, 40, "ptxas warning : C7512 ...\nptxas info : C7512", "loop.sass")
        with open(os.path.join(cache, "bad.json"), "w") as f:
            json.dump({"ok": False, "log": "error"}, f)  # a failed compile: no cubin, skipped
        stats = sass.cache_stats(cache, self.nvdisasm, 2)
        self.assertEqual(list(stats), ["attn<1>"])
        s = stats["attn<1>"]
        self.assertEqual((s.registers, s.spill_load_bytes, s.warnings, s.sass), (168, 40, "C7512", 16))
        self.assertEqual(s.loop.spill_instructions, 1)
        rc, out, _ = self.run_main(["stats", cache])
        self.assertEqual(rc, 0)
        self.assertIn("attn<1>  C7512", out)

    def test_compare_flags_the_build_that_spills_in_the_loop(self):
        # fake flashtune: `run Y --compile-only --arch A --db D --cache C` writes one entry into C
        def fake(listing):
            return _executable(os.path.join(self.d, f"ft_{listing}"), textwrap.dedent(f"""\
                #!/usr/bin/env python3
                import json, sys
                c = sys.argv[sys.argv.index("--cache") + 1]
                json.dump({{"ok": True, "name_expression": "attn<1>", "log": "",
                           "resources": {{"registers": 168, "spill_load_bytes": 4}}}}, open(c + "/k.json", "w"))
                open(c + "/k.cubin", "w").write("{listing}")
                """))
        yaml = os.path.join(self.d, "x.yaml")
        open(yaml, "w").close()
        rc, out, _ = self.run_main(["compare", "--base", fake("clean.sass"), "--new", fake("loop.sass"), yaml])
        self.assertEqual(rc, 1, out)
        self.assertIn("attn<1>: loop spill instructions 0 -> 1", out)
        rc, out, _ = self.run_main(["compare", "--base", fake("loop.sass"), "--new", fake("clean.sass"), yaml])
        self.assertEqual(rc, 0, out)
        self.assertIn("0 kernels worse", out)

    def test_compare_one_binary_over_two_template_folders(self):
        # fake flashtune: the listing is the file named `listing` in the --templates folder
        ft = _executable(os.path.join(self.d, "ft_templates"), textwrap.dedent("""\
            #!/usr/bin/env python3
            import json, sys
            c = sys.argv[sys.argv.index("--cache") + 1]
            listing = open(sys.argv[sys.argv.index("--templates") + 1] + "/listing").read()
            json.dump({"ok": True, "name_expression": "attn<1>", "log": "",
                       "resources": {"registers": 168, "spill_load_bytes": 4}}, open(c + "/k.json", "w"))
            open(c + "/k.cubin", "w").write(listing)
            """))
        folders = {}
        for tag, listing in (("a", "clean.sass"), ("b", "loop.sass")):
            folders[tag] = os.path.join(self.d, "t" + tag)
            os.makedirs(folders[tag])
            with open(os.path.join(folders[tag], "listing"), "w") as f:
                f.write(listing)
        yaml = os.path.join(self.d, "x.yaml")
        open(yaml, "w").close()
        rc, out, _ = self.run_main(["compare", "--base", ft, "--new", ft, "--base-templates", folders["a"],
                                    "--new-templates", folders["b"], yaml])
        self.assertEqual(rc, 1, out)
        self.assertIn("attn<1>: loop spill instructions 0 -> 1", out)
        # a kept folder is emptied first: the second compare (clean against clean) must not see the first's entry
        keep = os.path.join(self.d, "keep")
        rc, out, _ = self.run_main(["compare", "--base", ft, "--new", ft, "--base-templates", folders["a"],
                                    "--new-templates", folders["b"], "--keep", keep, yaml])
        self.assertEqual(rc, 1, out)
        with open(os.path.join(keep, "new", "stale.json"), "w") as f:
            json.dump({"ok": True, "name_expression": "attn<2>", "log": "",
                       "resources": {"registers": 168, "spill_load_bytes": 400}}, f)
        with open(os.path.join(keep, "new", "stale.cubin"), "w") as f:
            f.write("loop.sass")
        rc, out, _ = self.run_main(["compare", "--base", ft, "--new", ft, "--base-templates", folders["a"],
                                    "--new-templates", folders["a"], "--keep", keep, yaml])
        self.assertEqual(rc, 0, out)
        self.assertNotIn("attn<2>", out)
        self.assertEqual(sorted(os.listdir(os.path.join(keep, "new"))), ["k.cubin", "k.json"])
        rc, _, err = self.run_main(["compare", "--base", ft, "--new", ft, "--base-templates", folders["a"],
                                    "--new-templates", os.path.join(self.d, "nowhere"), yaml])
        self.assertEqual(rc, 2)
        self.assertIn("no such templates folder", err)

    def test_a_failing_build_and_a_missing_folder_are_one_line_each(self):
        failing = _executable(os.path.join(self.d, "ft_fail"), "#!/bin/sh\necho 'unknown family: nope' >&2\nexit 2\n")
        rc, _, err = self.run_main(["compare", "--base", failing, "--new", failing, os.path.join(self.d, "x.yaml")])
        self.assertEqual(rc, 2)
        self.assertIn("--compile-only failed: unknown family: nope", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        rc, _, err = self.run_main(["stats", os.path.join(self.d, "nowhere")])
        self.assertEqual(rc, 2)
        self.assertIn("no such cache folder", err)

    def test_no_nvdisasm_says_where_to_get_it(self):
        old = dict(os.environ)
        try:
            os.environ["PATH"] = self.d + "/empty"
            os.environ.pop("FLASHTUNE_NVDISASM", None)
            os.environ["CUDA_HOME"] = self.d + "/empty"
            try:
                path = sass.find_nvdisasm(None)
            except FileNotFoundError as e:
                self.assertIn("pip install nvidia-cuda-nvdisasm", str(e))
            else:  # this machine has one in /usr/local/cuda or a wheel: it must at least be executable
                self.assertTrue(os.access(path, os.X_OK))
            self.assertEqual(sass.find_nvdisasm(self.nvdisasm), self.nvdisasm)
        finally:
            os.environ.clear()
            os.environ.update(old)


def _ncu_csv(path, kernel, rows):
    """An ncu source page as tools/gpu_profile.sh writes it: rows of (address, source, executed, {reason: samples})."""
    head = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
            "Instructions Executed", "stall_barrier", "stall_long_sb", "stall_short_sb", "stall_long_sb (Not Issued)"]
    with open(path, "w") as f:
        f.write(f'"Kernel Name","{kernel}",\n' + ",".join(f'"{h}"' for h in head) + "\n")
        for address, source, executed, why in rows:
            cells = [address, source, str(sum(why.values())), "0", f"{executed:,}", str(why.get("barrier", 0)),
                     str(why.get("long_sb", 0)), str(why.get("short_sb", 0)), "7"]
            f.write(",".join(f'"{c}"' for c in cells) + "\n")
    return path


class Profile(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()
        # Kernel A: the wait loop's branch 60 samples (long_sb), the exp2's FFMA 30 (short_sb), a barrier 10.
        self.a = _ncu_csv(os.path.join(self.d, "ours.sass.csv"), "void k<128>(P)", [
            ("0x7f0000005f00", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2+UR12], R5", 1_000_000, {}),
            ("0x7f0000005f10", "@!P0  BRA 0x7f0000006000", 1_000_000, {"long_sb": 60}),
            ("0x7f0000005f20", "FFMA R184, R184, UR29, -R20", 2_000_000, {"short_sb": 30}),
            ("0x7f0000005f30", "BAR.SYNC.DEFER_BLOCKING R7, 0x100", 1_000_000, {"barrier": 10})])
        self.b = _ncu_csv(os.path.join(self.d, "peer.sass.csv"), "peer_kernel", [
            ("0x7e0000001000", "FFMA R1, R1, UR4, -R2", 4_000_000, {"short_sb": 5}),
            ("0x7e0000001010", "FSEL R1, R1, -INF, P0", 3_000_000, {"long_sb": 5})])

    def run_main(self, argv):
        return run_main(sass.main, argv)

    def test_reads_offsets_counts_and_reasons(self):
        p = sass.read_profile(self.a)
        self.assertEqual(p.kernel, "void k<128>(P)")
        self.assertEqual([r.offset for r in p.rows], [0, 0x10, 0x20, 0x30])  # offsets from the kernel's first instruction
        self.assertEqual(p.executed, 5_000_000)
        self.assertEqual(p.samples, 100)
        self.assertEqual(p.reasons(), {"long_sb": 60, "short_sb": 30, "barrier": 10})  # "Not Issued" columns left out
        self.assertEqual(p.by_opcode("executed")["BRA"], 1_000_000)  # the predicate is not the opcode
        self.assertEqual(p.by_opcode("samples")["FFMA"], 30)

    def test_report_ranks_instructions_and_sets_opcodes_side_by_side(self):
        rc, out, err = self.run_main(["profile", self.a, self.b, "--top", "2"])
        self.assertEqual(rc, 0, err)
        self.assertIn("== ours: void k<128>(P)", out)
        self.assertIn("stall reasons: long_sb 60.0 %, short_sb 30.0 %, barrier 10.0 %", out)
        ours = out.split("== peer")[0]
        top = ours.split("top 2 instructions by samples")[1].splitlines()[1:]
        self.assertEqual(len(top), 2, ours)  # --top 2
        self.assertTrue(top[0].split()[0] == "10" and "BRA" in top[0] and "long_sb 100" in top[0], top)
        self.assertTrue(top[1].split()[0] == "20" and "FFMA" in top[1] and "short_sb 100" in top[1], top)
        side = out.split("== executed by opcode [M]: ours | peer")[1].splitlines()
        rows = {line.split()[0]: line.split()[1:] for line in side if line.strip()}
        self.assertEqual(rows["FFMA"], ["2.0", "4.0"])
        self.assertEqual(rows["FSEL"], ["0.0", "3.0"])
        self.assertEqual(rows["all"], ["5.0", "7.0"])

    def test_a_file_that_is_not_a_source_page_is_one_line(self):
        bad = os.path.join(self.d, "bad.sass.csv")
        with open(bad, "w") as f:
            f.write("ID,Name\n1,x\n")
        rc, out, err = self.run_main(["profile", bad])
        self.assertEqual(rc, 2)
        self.assertEqual(out, "")
        self.assertIn("not an ncu SASS source page", err)
        self.assertEqual(len(err.strip().splitlines()), 1)
        rc, _, err = self.run_main(["profile", os.path.join(self.d, "missing.sass.csv")])
        self.assertEqual(rc, 2)
        self.assertEqual(len(err.strip().splitlines()), 1)


if __name__ == "__main__":
    unittest.main()
