"""Render a study's analysis: Markdown and CSV tables, PNG plots, and ``report.json``.

Input is ``results/<study>/runs.jsonl``; :func:`hpcdl.analysis.analyse` computes everything, and
this module only formats it: ``report.md``, one CSV per table, PNG plots, and ``report.json``
(the analysis object serialised), next to the records. Only numpy and matplotlib (Agg) are used,
so a report can be made anywhere the results folder is copied to. The sections are registered in
:mod:`.sections`; this module reads the records, writes the files and heads each with its command.
"""
from __future__ import annotations

from .reading import _resolve as runs_file      # a results folder's runs.jsonl, or the file given
from .table import Table
from .writing import Reading, _command, rendered_with, write_report, write_residuals
from ..model.inputs import Inputs    # what write_report takes of the model

__all__ = ["Inputs", "Reading", "Table", "rendered_with", "runs_file", "write_report",
           "write_residuals", "_command"]
