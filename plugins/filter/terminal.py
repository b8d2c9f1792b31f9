# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that lay text out for an 80-column terminal: a table, labelled records, wrapped prose.

The playbooks print their reports as the msg of a debug task, a list of lines. With the YAML result format (this
collection's ansible.cfg: callback_result_format = yaml) Ansible prints each line as "    - <line>", six columns
before it, and quotes a line YAML cannot print plain (one that starts with a space, or holds ': ', for instance),
two more. Each line these filters return takes at most `width` columns as YAML prints it (74 by default: 80 on the
terminal), so that no line folds or wraps. The one exception is a single word longer than a line, which is kept
whole: an image reference pinned to a digest is cut before its '@' instead, the digest on a line of its own.

Each filter is documented in the sidecar file named after it (terminal_table.yml, ...).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from collections.abc import Mapping

import yaml

from ansible.errors import AnsibleFilterError

# 80 columns less the "    - " the YAML result format prints before each item of a debug task's msg list.
WIDTH = 74
# Between the columns of a table; between a label and its value (the gap that tells them apart, see read_records).
COLUMN_GAP = " "
LABEL_GAP = "  "
# Before a value's further lines, when they do not start under its column.
CONTINUED = "  "


def printed_width(line):
    """The columns a line takes as an item of a YAML list, as Ansible's YAML result format prints it (quotes too)."""
    dumped = yaml.safe_dump([line], default_flow_style=False, allow_unicode=True, width=2 ** 30)
    return len(dumped.rstrip("\n")) - 2


def _text(value):
    """A cell, a label or a value as one line of text, its spaces single: '-' for nothing."""
    if value is None:
        return "-"
    return " ".join(str(value).split())


def _width(width):
    try:
        width = int(width)
    except (TypeError, ValueError):
        raise AnsibleFilterError("width must be an integer, got %r" % (width,))
    if width < 20:
        raise AnsibleFilterError("width must be at least 20 columns, got %d" % width)
    return width


def _wrap(words, width, first="", rest=""):
    """Words joined by spaces into lines of at most `width` printed columns, the first line starting with `first` (a
    label), the others with `rest` (spaces). A word too long to follow the label starts the next line; one too long
    to follow `rest` follows CONTINUED instead; one longer than any line is kept whole, on a line of its own."""
    lines, line, lead = [], None, first
    for word in words:
        if line is not None and printed_width(line + " " + word) <= width:
            line += " " + word
            continue
        if line is not None:
            lines.append(line)
            lead = rest
        if printed_width(lead + word) > width and lead is first and first.strip():
            lines.append(first.rstrip())  # the label alone
            lead = rest
        if printed_width(lead + word) > width and lead:
            lead = CONTINUED
        line = lead + word
    lines.append(first.rstrip() if line is None else line)
    return lines


def terminal_lines(text, width=WIDTH):
    """Prose (a string, or a list of paragraphs) as lines that fit, broken between words."""
    width = _width(width)
    paragraphs = [text] if not isinstance(text, (list, tuple)) else text
    lines = []
    for paragraph in paragraphs:
        lines.extend(_wrap(_text(paragraph).split(), width))
    return lines


def _field(head, value, width):
    """One labelled value: beside its label when it fits; else an image reference pinned to a digest cut before its
    '@' (the digest on a line of its own), or words wrapped under the value's column."""
    line = (head + value).rstrip()
    if printed_width(line) <= width:
        return [line]
    words = value.split()
    if len(words) == 1 and "@" in value:
        name, digest = value.split("@", 1)
        return _field(head, name, width) + ["@" + digest]
    return _wrap(words, width, first=head, rest=" " * len(head))


def terminal_records(records, width=WIDTH):
    """Records (lists of [label, value] pairs, or mappings) one after the other, as 'label  value' lines, every
    value starting in the same column."""
    width = _width(width)
    records = [list(record.items()) if isinstance(record, Mapping) else [tuple(pair) for pair in record]
               for record in records or []]
    for record in records:
        for pair in record:
            if len(pair) != 2:
                raise AnsibleFilterError("a record is a list of [label, value] pairs, got %r" % (pair,))
            # Printed with single spaces, a label ends where two begin; a line starting with '@' continues a value.
            if pair[0] is None or not _text(pair[0]) or _text(pair[0]).startswith("@"):
                raise AnsibleFilterError("a label is a word or words, not starting with '@', got %r" % (pair[0],))
    label_width = max([len(_text(label)) for record in records for label, _value in record] or [0])
    return [line for record in records for label, value in record
            for line in _field(_text(label).ljust(label_width) + LABEL_GAP, _text(value), width)]


def read_records(lines):
    """The records terminal_records printed, read back: a list of (label, value) pairs, continuation lines (they start
    with a space, or with '@' for a digest) joined to the value before them. For tests and tools that read a report."""
    pairs = []
    for line in lines:
        if pairs and line.startswith(" "):
            pairs[-1] = (pairs[-1][0], (pairs[-1][1] + " " + line.strip()).strip())
        elif pairs and line.startswith("@"):
            pairs[-1] = (pairs[-1][0], pairs[-1][1] + line)
        else:
            parts = re.split(r"\s{2,}", line, 1)
            pairs.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return pairs


def _table_lines(header, rows, widths, align):
    """The table's lines, and those of them that are a long name alone."""
    def line(cells):
        return COLUMN_GAP.join(cell.rjust(size) if side == ">" else cell.ljust(size)
                               for cell, size, side in zip(cells, widths, align)).rstrip()

    lines, names = [line(header)], set()
    for row in rows:
        if len(row[0]) > widths[0]:  # a name too long for its column: on a line of its own, above its row
            names.add(len(lines))
            lines.append(row[0])
            lines.append(line([""] + row[1:]))
        else:
            lines.append(line(row))
    return lines, names


def terminal_table(rows, columns, align=None, legend=None, width=WIDTH):
    """Rows under a header, each column as wide as its widest cell. The first column (a name) gets the room the
    others leave; a longer name is printed on a line of its own, above its row. When the other columns alone are
    too wide for that, each row becomes a record (terminal_records) instead. legend: prose printed after the table."""
    width = _width(width)
    header = [_text(column) for column in columns or []]
    if not header:
        raise AnsibleFilterError("a table needs at least one column")
    align = list(align or "<" * len(header))
    if len(align) != len(header) or set(align) - set("<>"):
        raise AnsibleFilterError("align has one '<' (left) or '>' (right) per column, got %r for %d columns"
                                 % ("".join(align), len(header)))
    cells = []
    for row in rows or []:
        row = [_text(cell) for cell in row]
        if len(row) != len(header):
            raise AnsibleFilterError("each row has %d cells, one per column; got %r" % (len(header), row))
        cells.append(row)
    widths = [max([len(header[i])] + [len(row[i]) for row in cells]) for i in range(len(header))]
    # The first column gets what the others and the gaps leave, less two for the quotes YAML puts around a row whose
    # name cell is blank (it starts with a space).
    room = width - sum(widths[1:]) - len(COLUMN_GAP) * (len(header) - 1)
    if widths[0] > room:
        widths[0] = room - 2
    lines = None
    while lines is None and widths[0] >= len(header[0]):
        lines, names = _table_lines(header, cells, widths, align)
        # A cell may make YAML quote its row (': ' in it): the name column gives up what that costs.
        over = max(printed_width(line) for i, line in enumerate(lines) if i not in names) - width
        if over > 0:
            widths[0] = min(widths[0], room - 2) - over
            lines = None
    if lines is None:
        lines = terminal_records([list(zip(header, row)) for row in cells], width)
    if legend:
        lines = lines + terminal_lines(legend, width)
    return lines


class FilterModule:
    """vmsched.kubevirt filters for reports that fit a terminal."""

    def filters(self):
        return {
            "terminal_table": terminal_table,
            "terminal_records": terminal_records,
            "terminal_lines": terminal_lines,
        }
