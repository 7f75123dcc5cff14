"""Breakdown: where one iteration's seconds go, by named phase, and the communication beside them.

The phases add up to the iteration (a ``Prediction`` refuses a breakdown that does not). Every
phase name is a word of ``Phase``, defined here once, and the phases each plan produces are
declared here too (``ddp_phases``, ``SHARDED_PHASES``, ``HSDP_PHASES``, ``LAYOUT_PHASES``,
``KFAC_PHASES``), so a renderer, the search or a script reads a phase by its name, never by a
string of its own.

Communication appears among the phases only as far as the compute waited for it (the
``exposed_*`` phases of ``EXPOSED_COMM_PHASES``); ``comm_total_s`` is all of it, so
``hidden_comm_s`` (what overlapped compute) is the total less the exposed part. K-FAC's factor
and inverse collectives are phases of their own and not in ``comm_total_s``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

Phase = Literal[
    "data", "forward", "backward", "recompute",
    "exposed_comm", "exposed_all_gather", "exposed_reduce_scatter", "exposed_cross_node_allreduce",
    "exposed_tp", "exposed_cp", "exposed_ep", "exposed_pp", "bubble", "exposed_dp",
    "comm_interference", "optimizer", "overhead",
    "factor_compute", "exposed_factor_comm", "inversion", "inverse_broadcast", "kfac_comm_interference", "preconditioning",
]
PHASES: tuple[Phase, ...] = get_args(Phase)
(DATA, FORWARD, BACKWARD, RECOMPUTE,
 EXPOSED_COMM, EXPOSED_ALL_GATHER, EXPOSED_REDUCE_SCATTER, EXPOSED_CROSS_NODE_ALLREDUCE,
 EXPOSED_TP, EXPOSED_CP, EXPOSED_EP, EXPOSED_PP, BUBBLE, EXPOSED_DP,
 COMM_INTERFERENCE, OPTIMIZER, OVERHEAD,
 FACTOR_COMPUTE, EXPOSED_FACTOR_COMM, INVERSION, INVERSE_BROADCAST, KFAC_COMM_INTERFERENCE, PRECONDITIONING) = PHASES

# The phases of each plan, in the order the documents show them.
DDP_PHASES: tuple[Phase, ...] = (DATA, FORWARD, BACKWARD, EXPOSED_COMM, COMM_INTERFERENCE, OPTIMIZER, OVERHEAD)
KFAC_PHASES: tuple[Phase, ...] = (FACTOR_COMPUTE, EXPOSED_FACTOR_COMM, INVERSION, INVERSE_BROADCAST,
                                  KFAC_COMM_INTERFERENCE, PRECONDITIONING)
SHARDED_EXPOSED: tuple[Phase, ...] = (EXPOSED_ALL_GATHER, EXPOSED_REDUCE_SCATTER, EXPOSED_CROSS_NODE_ALLREDUCE)
SHARDED_PHASES: tuple[Phase, ...] = (DATA, FORWARD, BACKWARD, RECOMPUTE, EXPOSED_ALL_GATHER, EXPOSED_REDUCE_SCATTER,
                                     COMM_INTERFERENCE, OPTIMIZER, OVERHEAD)  # zero2, fsdp
HSDP_PHASES: tuple[Phase, ...] = (DATA, FORWARD, BACKWARD, RECOMPUTE, *SHARDED_EXPOSED, COMM_INTERFERENCE, OPTIMIZER,
                                  OVERHEAD)
LAYOUT_PHASES: tuple[Phase, ...] = (FORWARD, BACKWARD, RECOMPUTE, EXPOSED_TP, EXPOSED_CP, EXPOSED_EP, EXPOSED_PP, BUBBLE,
                                    EXPOSED_DP, COMM_INTERFERENCE, OPTIMIZER, OVERHEAD)
# Communication the compute waited for (K-FAC's factor all-reduce is K-FAC's own phase).
EXPOSED_COMM_PHASES: frozenset[Phase] = frozenset({EXPOSED_COMM, *SHARDED_EXPOSED, EXPOSED_TP, EXPOSED_CP, EXPOSED_EP,
                                                   EXPOSED_PP, EXPOSED_DP})
# The documents show comm_total_s under this key, after the phases (where it has always been).
COMM_TOTAL_KEY = "comm_total"


def ddp_phases(recompute: bool, kfac: bool) -> tuple[Phase, ...]:
    """DDP's phases: recompute after the others when activation checkpointing recomputes, then
    K-FAC's when the job is K-FAC's."""
    return DDP_PHASES + ((RECOMPUTE,) if recompute else ()) + (KFAC_PHASES if kfac else ())


@dataclass(frozen=True)
class Breakdown(Mapping[Phase, float]):
    """Seconds per phase of one iteration, in order, and the communication beside them.

    A read-only mapping phase -> seconds (``b[FORWARD]``, ``b.items()``).

    Attributes:
        phases: (phase, seconds) pairs in the order the documents show them; each phase once.
        comm_total_s: Communication seconds per iteration, exposed or hidden behind compute; None
            where nothing was modelled (a speed model without phases).

    Raises:
        ValueError: for a name that is not a ``Phase``, or a phase given twice.
    """

    phases: tuple[tuple[Phase, float], ...] = ()
    comm_total_s: float | None = None

    def __post_init__(self) -> None:
        names = [name for name, _ in self.phases]
        unknown = sorted(set(names) - set(PHASES))
        if unknown:
            raise ValueError(f"unknown breakdown phase(s) {', '.join(unknown)}; the phases are {', '.join(PHASES)}")
        if len(set(names)) != len(names):
            raise ValueError(f"a breakdown phase is given twice: {', '.join(names)}")

    @classmethod
    def of(cls, declared: Sequence[Phase], seconds: Mapping[Phase, float], comm_total_s: float | None = None) -> Breakdown:
        """The breakdown of a plan whose phases are ``declared``, in that order.

        Raises:
            ValueError: when ``seconds`` misses a declared phase or has one that is not declared.
        """
        if set(seconds) != set(declared) or len(seconds) != len(declared):
            raise ValueError(f"the plan declares the phases {', '.join(declared)}, not {', '.join(seconds)}")
        return cls(tuple((name, seconds[name]) for name in declared), comm_total_s)

    @classmethod
    def from_json(cls, doc: Mapping[str, float]) -> Breakdown:
        """The breakdown a document shows (``to_json``): its phases, then ``comm_total``."""
        phases = tuple((name, float(value)) for name, value in doc.items() if name != COMM_TOTAL_KEY)
        total = doc.get(COMM_TOTAL_KEY)
        return cls(phases, None if total is None else float(total))  # type: ignore[arg-type]  # names checked on construction

    def __getitem__(self, phase: Phase) -> float:
        for name, value in self.phases:
            if name == phase:
                return value
        raise KeyError(phase)

    def __iter__(self) -> Iterator[Phase]:
        return (name for name, _ in self.phases)

    def __len__(self) -> int:
        return len(self.phases)

    @property
    def total_s(self) -> float:
        """The phases added up, in order: the iteration's seconds."""
        return sum(value for _, value in self.phases)

    @property
    def exposed_comm_s(self) -> float:
        """Communication the compute waited for (``EXPOSED_COMM_PHASES``)."""
        return sum(value for name, value in self.phases if name in EXPOSED_COMM_PHASES)

    @property
    def hidden_comm_s(self) -> float:
        """Communication that overlapped compute: the total less what was exposed."""
        return max(0.0, (self.comm_total_s or 0.0) - self.exposed_comm_s)

    def with_phase(self, phase: Phase, seconds: float) -> Breakdown:
        """This breakdown with ``phase`` at ``seconds`` (in its place, or last when new)."""
        if phase in self:
            return Breakdown(tuple((name, seconds if name == phase else value) for name, value in self.phases),
                             self.comm_total_s)
        return Breakdown((*self.phases, (phase, seconds)), self.comm_total_s)

    def to_json(self) -> dict[str, float]:
        """The breakdown as the documents show it: the phases, then ``comm_total`` (not a phase:
        the whole communication, exposed or not) when there is one."""
        out: dict[str, float] = dict(self.phases)
        if self.comm_total_s is not None:
            out[COMM_TOTAL_KEY] = self.comm_total_s
        return out
