"""Figures: deterministic PNGs drawn with matplotlib (Agg) from an :class:`~cardgen.analysis.analyse.Analysis`.

Three layers, tested separately: :mod:`.data` turns the analysis into plain arrays (pure, no matplotlib),
:mod:`.draw` draws those arrays onto a given ``Axes``, :mod:`.render` lays out figures and writes the files
(``write_figures``). :mod:`.names` holds the file names. Importing this package loads no matplotlib.
"""
