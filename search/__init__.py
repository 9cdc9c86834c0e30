"""Who decides and where it runs: study files, strategies, pruners, storage, the Dask driver
and the ``search`` command line.

>>> from search import parse_study
>>> parse_study({"name": "demo"}).strategy.name
'tpe'
"""

from search._driver import Driver, RunCounts
from search._errors import StudyError
from search._study import open_study
from search._study_file import StudyFile, load_study_file, parse_study

__all__ = ["Driver", "RunCounts", "StudyError", "StudyFile", "load_study_file", "open_study",
           "parse_study"]
