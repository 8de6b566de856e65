"""The part-by-part model of a study's step and its forecast, in its own room: what it is
calibrated with (:class:`.inputs.Inputs`), the model (:mod:`.parts`), the held-out check beside
baselines and bands (:mod:`.predict`, :mod:`.baselines`, :mod:`.floor`), the forecast at planned
node counts and on named networks (:mod:`.forecast`), the MPI library's allreduce and what each
link carries (:mod:`.allreduce`), the allocation's files it reads (:mod:`.exchange_bench`,
:mod:`.loop_share`, :mod:`.host_spread`), the runs as it reads them (:mod:`.measured`) and the
model carried to another link rate and to the remedies (:mod:`.transfer`). numpy only."""
from .axis import AxisRuns, Calibrated, Files
from .inputs import FORECAST, Inputs

# re-exported: the package's names as its users import them
__all__ = ["AxisRuns", "Calibrated", "FORECAST", "Files", "Inputs"]
