"""Reading the greedy allocator's spill/reload/copy remarks (the regalloc reward)."""

from __future__ import annotations

import pytest

from pymlgo.problems.regalloc.remarks import (
    DEFAULT_WEIGHTS,
    CostWeights,
    RemarkFormatError,
    SpillStats,
    parse_remarks,
    read_remarks,
)

# Shaped like LLVM's output, including a DebugLoc wrapped over two lines, a remark of
# another pass, and an argument that carries its own nested DebugLoc.
SAMPLE = """\
--- !Missed
Pass:            regalloc
Name:            LoopSpillReloadCopies
DebugLoc:        { File: 'a.c', Line: 8,
                   Column: 5 }
Function:        sort_range
Args:
  - NumReloads:      '1'
  - String:          ' reloads '
  - TotalReloadsCost: '8.000000e+00'
  - String:          ' total reloads cost '
  - String:          generated in loop
...
--- !Missed
Pass:            regalloc
Name:            SpillReloadCopies
Function:        sort_range
Args:
  - NumSpills:       '2'
  - String:          ' spills '
  - TotalSpillsCost: '1.000000e+00'
  - String:          ' total spills cost '
  - NumReloads:      '2'
  - String:          ' reloads '
  - TotalReloadsCost: '8.750000e+00'
  - String:          ' total reloads cost '
  - NumFoldedReloads: '1'
  - String:          ' folded reloads '
  - TotalFoldedReloadsCost: '5.000000e-01'
  - String:          ' total folded reloads cost '
  - NumVRCopies:     '30'
  - String:          ' virtual registers copies '
  - TotalCopiesCost: '2.800000e+01'
  - String:          ' total copies cost '
  - String:          generated in function
...
--- !Passed
Pass:            inline
Name:            Inlined
Function:        main
Args:
  - Callee:          helper
    DebugLoc:        { File: 'a.c', Line: 3, Column: 0 }
  - String:          ' inlined'
...
--- !Missed
Pass:            regalloc
Name:            SpillReloadCopies
Function:        'odd: name'
Args:
  - NumVRCopies:     '1'
  - String:          ' virtual registers copies '
  - TotalCopiesCost: '5.000000e-01'
  - String:          ' total copies cost '
  - String:          generated in function
...
"""


def test_function_remarks_give_per_function_totals_and_loops_stay_separate():
    report = parse_remarks(SAMPLE.splitlines(keepends=True))
    assert set(report.functions) == {"sort_range", "odd: name"}
    s = report.functions["sort_range"]
    assert (s.spills, s.reloads, s.folded_reloads, s.copies) == (2, 2, 1, 30)
    assert (s.spills_cost, s.reloads_cost, s.copies_cost) == (1.0, 8.75, 28.0)
    # loop remarks are subsets of their function's remark: reported, never added
    assert [(fn, st.reloads_cost) for fn, st in report.loops] == [("sort_range", 8.0)]
    assert report.total.copies == 31


def test_weighted_cost_uses_llvm_regallocscore_weights():
    s = SpillStats(spills_cost=1.0, folded_spills_cost=2.0, reloads_cost=3.0,
                   folded_reloads_cost=0.5, copies_cost=10.0)
    assert CostWeights(store=1.0, load=4.0, copy=0.2) == DEFAULT_WEIGHTS
    assert s.weighted_cost() == pytest.approx(1.0 + 2.0 + 4 * 3.5 + 0.2 * 10.0)
    report = parse_remarks(SAMPLE.splitlines())
    assert report.function_costs()["sort_range"] == pytest.approx(1.0 + 4 * 9.25 + 0.2 * 28)


def test_quoted_function_names_are_decoded():
    text = SAMPLE.replace("'odd: name'", '"tab\\there \\x41"').replace(
        "Function:        sort_range", "Function:        'it''s'")
    report = parse_remarks(text.splitlines())
    assert set(report.functions) == {"it's", "tab\there A"}


def test_a_function_reported_twice_is_summed():
    twice = SAMPLE + SAMPLE
    assert parse_remarks(twice.splitlines()).functions["sort_range"].spills == 4


def test_malformed_numbers_and_lines_are_errors():
    with pytest.raises(RemarkFormatError, match="NumSpills"):
        parse_remarks(SAMPLE.replace("NumSpills:       '2'", "NumSpills:       'x'")
                      .splitlines())
    with pytest.raises(RemarkFormatError, match="Key: value"):
        parse_remarks(["--- !Missed", "garbage without colon", "..."])


def test_no_remark_file_means_no_spill_code(tmp_path):
    assert read_remarks(tmp_path / "absent.yaml").functions == {}
