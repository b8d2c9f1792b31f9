# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/filter/terminal.py: tables, records and prose whose every line, as the YAML result format
prints it, fits an 80-column terminal; and its sidecar documentation."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import random
import string

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible.plugins.loader import callback_loader

from ansible_collections.vmsched.kubevirt.plugins.filter import terminal
from ansible_collections.vmsched.kubevirt.plugins.filter.terminal import (
    FilterModule,
    printed_width,
    read_records,
    terminal_lines,
    terminal_records,
    terminal_table,
)

DIGEST = "@sha256:" + "0123456789abcdef" * 4
IMAGE = "registry.k8s.io/descheduler/descheduler:v0.36.0"


def printed(lines):
    """The lines as Ansible prints a debug task's msg with the YAML result format: `ansible-playbook` with this
    collection's ansible.cfg (callback_result_format = yaml)."""
    callback = callback_loader.get("ansible.builtin.default")
    callback.set_options(direct={"result_format": "yaml"})
    return callback._dump_results({"msg": lines}).splitlines()  # pylint: disable=protected-access


def test_filter_names():
    assert sorted(FilterModule().filters()) == ["terminal_lines", "terminal_records", "terminal_table"]


@pytest.mark.parametrize("name", ["terminal_lines", "terminal_records", "terminal_table"])
def test_every_filter_has_sidecar_docs(name):
    with open(os.path.join(os.path.dirname(terminal.__file__), name + ".yml"), encoding="utf-8") as handle:
        docs = yaml.safe_load(handle)
    assert docs["DOCUMENTATION"]["name"] == name
    assert docs["RETURN"]["_value"]["type"] == "list"


@pytest.mark.parametrize("line, width", [
    ("plain words", 11),
    ("a: b", 6),             # ': ' makes YAML quote it
    ("  indented", 12),      # so does a leading space
    ("@sha256:abc", 13),     # and a leading '@'
    ("it's: quoted", 15),    # a quote inside single quotes is doubled
])
def test_printed_width_counts_what_yaml_adds(line, width):
    assert printed_width(line) == width
    assert printed([line])[-1] == "    - " + yaml.safe_dump([line], width=1000).strip()[2:]


def test_lines_break_between_words_and_join_back():
    text = " ".join(["word%d" % i for i in range(60)])
    lines = terminal_lines(text)
    assert len(lines) > 1 and " ".join(lines) == text
    assert all(printed_width(line) <= 74 for line in lines), lines
    assert all(len(line) > 74 - len("word59 ") for line in lines[:-1]), lines  # each full before the next starts


def test_lines_keep_a_word_longer_than_a_line_whole_and_alone():
    lines = terminal_lines("before " + IMAGE + DIGEST + " after")
    assert lines == ["before", IMAGE + DIGEST, "after"]


def test_lines_of_paragraphs_start_each_on_a_line_of_its_own():
    assert terminal_lines(["one two", "three"], width=40) == ["one two", "three"]


def test_records_align_values_and_read_back():
    records = [[["cluster", "localhost"], ["scheduler config", "kubescheduler.config.k8s.io/v1"], ["VMs", 4],
                ["CV", None]]]
    lines = terminal_records(records)
    assert lines == ["cluster           localhost",
                     "scheduler config  kubescheduler.config.k8s.io/v1",
                     "VMs               4",
                     "CV                -"]
    assert read_records(lines) == [("cluster", "localhost"), ("scheduler config", "kubescheduler.config.k8s.io/v1"),
                                   ("VMs", "4"), ("CV", "-")]


def test_records_cut_a_pinned_reference_before_its_digest():
    lines = terminal_records([{"cluster": "k8s-1.34", "descheduler image": "127.0.0.1:37413/" + IMAGE[16:] + DIGEST}])
    assert lines[1:] == ["descheduler image  127.0.0.1:37413/descheduler/descheduler:v0.36.0", DIGEST]
    assert all(printed_width(line) <= 74 for line in lines), lines
    assert dict(read_records(lines))["descheduler image"] == "127.0.0.1:37413/" + IMAGE[16:] + DIGEST


def test_records_wrap_prose_under_the_value_column():
    message = ("Read the server version and the served APIs: cannot reach the Kubernetes API server at "
               "https://127.0.0.1:9: HTTPSConnection(host='127.0.0.1', port=9): Failed to establish a new connection")
    lines = terminal_records([[["cluster", "unreachable"], ["FAILED", message]]])
    assert len(lines) > 2 and all(line.startswith(" " * len("cluster  ")) for line in lines[2:]), lines
    assert all(printed_width(line) <= 74 for line in lines), lines
    assert dict(read_records(lines)) == {"cluster": "unreachable", "FAILED": message}


@pytest.mark.parametrize("label", ["@digest", "", " ", None])
def test_records_refuse_a_label_a_reader_cannot_tell_from_a_value(label):
    with pytest.raises(AnsibleFilterError, match="a label is"):
        terminal_records([[[label, "value"]]])


def test_records_print_a_label_with_single_spaces():
    assert read_records(terminal_records([[["two  spaces\n", "value"]]])) == [("two spaces", "value")]


def test_table_columns_as_wide_as_their_cells_aligned_as_asked():
    lines = terminal_table([["node01", 2, "1.5/16"], ["node02", 10, "0/16"]], ["NODE", "VMIS", "CPU"], align="<><")
    assert lines == ["NODE   VMIS CPU",
                     "node01    2 1.5/16",
                     "node02   10 0/16"]


def test_table_puts_a_name_too_long_for_its_column_on_a_line_of_its_own():
    rows = [["node01", 2, "1.5/16", "2.3/64", "no", 0, 50, 12],
            ["worker-17.prod.example.com", 12, "127.75/128", "1023.9/1024", "yes", 3, 50, None]]
    columns = ["NODE", "VMIS", "CPU", "MEMORY", "CORDONED", "TAINTS", "IMAGES", "IMAGELOCALITY"]
    lines = terminal_table(rows, columns, align="<>>><>>>")
    assert lines[0].split() == columns and lines[1].split()[0] == "node01", lines
    assert lines[2] == "worker-17.prod.example.com" and lines[3].split() == [str(c) for c in rows[1][1:-1]] + ["-"]
    assert all(printed_width(line) <= 74 for line in lines), lines
    # Every cell in its column: the right-aligned ones end where their header ends.
    assert lines[3].index("12") + 2 == lines[0].index("VMIS") + 4, lines


def test_table_falls_back_to_records_when_the_columns_alone_are_too_wide():
    lines = terminal_table([["node01", "x" * 40, "y" * 40]], ["NODE", "A", "B"])
    assert read_records(lines) == [("NODE", "node01"), ("A", "x" * 40), ("B", "y" * 40)]


def test_table_gives_up_room_for_quotes_a_cell_brings():
    lines = terminal_table([["n" * 30, "status: ok " + "z" * 30]], ["NODE", "STATE"], width=74)
    assert all(printed_width(line) <= 74 for line in lines), [(printed_width(line), line) for line in lines]


def test_table_legend_follows_it():
    lines = terminal_table([["a", 1]], ["NAME", "N"], legend="N is how many.")
    assert lines[-1] == "N is how many."


@pytest.mark.parametrize("kwargs, message", [
    ({"rows": [["a"]], "columns": ["A", "B"]}, "each row has 2 cells"),
    ({"rows": [], "columns": []}, "at least one column"),
    ({"rows": [["a", "b"]], "columns": ["A", "B"], "align": "<|"}, "align has one"),
    ({"rows": [["a"]], "columns": ["A"], "width": 5}, "at least 20"),
])
def test_table_refuses_what_it_cannot_lay_out(kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        terminal_table(**kwargs)


def _word(rng, longest):
    return "".join(rng.choice(string.ascii_lowercase + string.digits + ".-/:")
                   for _letter in range(rng.randint(1, longest)))


def test_no_printed_line_is_wider_than_the_terminal():
    """Random tables, records and prose (words shorter than a line; references pinned to digests), printed as
    ansible-playbook prints them: no line over 80 columns."""
    rng = random.Random(30)
    for _case in range(200):
        columns = [_word(rng, 10).upper() for _column in range(rng.randint(1, 8))]
        rows = [[_word(rng, 30 if i == 0 else 9) for i in range(len(columns))] for _row in range(rng.randint(0, 4))]
        records = [[[_word(rng, 18), " ".join(_word(rng, 12) for _word_index in range(rng.randint(1, 12)))]
                    for _field in range(rng.randint(1, 5))] + [["image", _word(rng, 50) + DIGEST]]]
        prose = " ".join(_word(rng, 20) for _word_index in range(rng.randint(1, 40)))
        for lines in (terminal_table(rows, columns, align="".join(rng.choice("<>") for _column in columns),
                                     legend=prose), terminal_records(records), terminal_lines(prose)):
            shown = printed(lines)
            assert shown[:2] == ["", "    msg:"], shown
            assert all(len(line) <= 80 for line in shown[2:]), [line for line in shown if len(line) > 80]
        assert read_records(terminal_records(records)) == [(label, " ".join(value.split()))
                                                           for label, value in records[0]]
