"""Renderers: turn results into tables, JSON documents, markdown and plots. They decide nothing:
every figure and every judgement (feasible, close call, passed) comes with the result.

One module per command (``predict_view``, ``recommend_view``, ``check_view``, ``catalog_view``,
``profiling_view`` for `srift profile` and `srift calibrate`, ``examples_view``), shared
formatting in ``format``, tables that fit the terminal in ``table``, the recommend plot in
``plot``, the hand-off to SkyPilot and torchrun in ``handoff``.
"""
