"""Rendering: a Report (or a description, or a gate result) for people and machines.

:mod:`.text` writes the numbers and sentences every renderer shares (:mod:`.findings`, those of the findings);
:mod:`.terminal`, :mod:`.markdown` and :mod:`.json` lay out a compare report, chosen from
:data:`.registry.COMPARE_RENDERERS`; :mod:`.html` writes the self-contained HTML report (and a notebook's view);
:mod:`.gate` renders gate results (terminal, JSON, JUnit, GitHub); :mod:`.plots` draws the figures;
:mod:`.table_files` writes tables (``rollaudit export``); ``schemas/`` holds the JSON Schemas of the ``--json``
documents (``rollaudit schema``); :mod:`.dashboards` shows a run step by step (TensorBoard, Weights & Biases,
``rollaudit watch``).
"""
