"""A REINFORCE controller (Zoph & Le 2017 style) with independent logits per decision.

Each decision ``space.suggest`` asks for (every genome edge / node choice, every scalar) has its own
softmax over arms: a categorical's choices, an integer's values when few, else ``bins`` equal bins
of the (log) range, drawn uniformly inside. After each COMPLETE trial the logits of the decisions it
took move along ``advantage * grad log p + entropy_weight * grad H``, where the advantage is the
reward minus a moving-average baseline (decay ``baseline_decay``), scaled by the moving standard
deviation of that difference and clipped to [-3, 3] so one learning rate fits any metric's scale.
The reward is not the value itself but its rank among the results replayed so far, through the
inverse normal CDF: a diverged run (a loss 10x the median, or 1e30) is then just the worst result
so far, where as a raw reward it would drag the baseline and inflate the deviation for dozens of
updates.

Asynchrony: with trials running, a result comes back for a draw an older policy made. With
``importance_weights``, the draw's log-probability under the policy that proposed it is stored on
the trial (``detol:policy_logp``, per decision) and its update is weighted by
``pi_now(draw) / pi_then(draw)``, clipped to [1/3, 3] (off-policy REINFORCE); sequentially the
ratio is 1 and nothing changes.

The policy is a function of the COMPLETE trials in storage, replayed in the order they finished;
the replay is cached per study and extended incrementally, so a resumed study (or a second driver)
restores the same policy, and asking never waits for running trials (they only count as repeats to
avoid).
"""

from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.study import Study
from optuna.trial import FrozenTrial

import spaces
from search.strategies._base import (
    FALLBACK_ATTR,
    ProposalSampler,
    candidate_key,
    complete_in_order,
    draw,
    from_unit,
    sign,
    study_key,
    to_unit,
)
from search.strategies._surrogate import probit

_TRIES = 50  # policy draws tried to find a candidate that is not a repeat
_CLIP = 3.0  # largest scaled advantage
_RATIO = 3.0  # importance weights are clipped to [1 / _RATIO, _RATIO]
LOGP_ATTR = "detol:policy_logp"  # name -> log-probability of the proposing policy's draw


@dataclass
class Policy:
    """Independent logits per decision, the baseline and the scale of the advantage."""

    bins: int
    logits: dict[str, np.ndarray] = field(default_factory=dict)
    dists: dict[str, BaseDistribution] = field(default_factory=dict)
    baseline: float = 0.0
    variance: float = 0.0
    updates: int = 0

    def _values(self, dist: BaseDistribution) -> int | None:
        """How many values a numeric ``dist`` has when it has few enough for one arm each."""
        if isinstance(dist, IntDistribution) and not dist.log:
            n = (dist.high - dist.low) // dist.step + 1
        elif isinstance(dist, FloatDistribution) and dist.step is not None:
            n = round((dist.high - dist.low) / dist.step) + 1
        else:
            return None
        return n if n <= self.bins else None

    def _arms(self, dist: BaseDistribution) -> int:
        if isinstance(dist, CategoricalDistribution):
            return len(dist.choices)
        return self._values(dist) or self.bins

    def _logits(self, name: str, dist: BaseDistribution) -> np.ndarray:
        if self.dists.get(name) != dist:  # first sight, or the space changed: start uniform
            self.dists[name] = dist
            self.logits[name] = np.zeros(self._arms(dist))
        return self.logits[name]

    def probabilities(self, name: str, dist: BaseDistribution) -> np.ndarray:
        z = self._logits(name, dist)
        p = np.exp(z - z.max())
        return p / p.sum()

    def choose(self, rng: np.random.Generator, name: str, dist: BaseDistribution) -> Any:
        """A draw for one decision (a :data:`Chooser`)."""
        p = self.probabilities(name, dist)
        arm = int(rng.choice(len(p), p=p))
        if isinstance(dist, CategoricalDistribution):
            return dist.choices[arm]
        assert isinstance(dist, FloatDistribution | IntDistribution)
        if self._values(dist) is not None:
            step = dist.step
            value = dist.low + arm * step  # type: ignore[operator]
            return int(value) if isinstance(dist, IntDistribution) else float(value)
        return from_unit(dist, (arm + float(rng.random())) / len(p))

    def arm(self, name: str, dist: BaseDistribution, value: Any) -> int | None:
        """The arm that ``value`` came from, or None if it is not a value of ``dist``."""
        n = len(self._logits(name, dist))
        if isinstance(dist, CategoricalDistribution):
            try:
                return int(dist.to_internal_repr(value))
            except ValueError:
                return None
        assert isinstance(dist, FloatDistribution | IntDistribution)
        if self._values(dist) is not None:
            return min(n - 1, max(0, round((value - dist.low) / dist.step)))  # type: ignore[operator]
        return min(n - 1, int(to_unit(dist, value) * n))

    def log_probability(self, name: str, dist: BaseDistribution, value: Any) -> float | None:
        """log pi(the arm ``value`` came from), or None if it is not a value of ``dist``."""
        arm = self.arm(name, dist, value)
        return None if arm is None else float(np.log(max(self.probabilities(name, dist)[arm],
                                                          1e-300)))

    def update(
        self,
        taken: dict[str, tuple[BaseDistribution, Any]],
        reward: float,
        *,
        learning_rate: float,
        entropy_weight: float,
        baseline_decay: float,
        weight: float = 1.0,
    ) -> None:
        """One REINFORCE step for a finished trial's decisions ``name -> (distribution, value)``;
        ``weight`` scales the policy-gradient term (an importance weight)."""
        if self.updates == 0:
            self.baseline, self.updates = reward, 1
            return
        diff = reward - self.baseline
        if self.updates == 1:
            self.variance = diff * diff
        else:
            self.variance = baseline_decay * self.variance + (1 - baseline_decay) * diff * diff
        scaled = diff / math.sqrt(self.variance) if self.variance > 0 else 0.0
        adv = weight * max(-_CLIP, min(_CLIP, scaled))
        for name, (dist, value) in taken.items():
            arm = self.arm(name, dist, value)
            if arm is None:
                continue
            p = self.probabilities(name, dist)
            logp = np.log(np.maximum(p, 1e-300))
            grad = -adv * p
            grad[arm] += adv
            grad += entropy_weight * (-p * (logp + float(-(p * logp).sum())))
            self.logits[name] = self.logits[name] + learning_rate * grad
        self.baseline = baseline_decay * self.baseline + (1 - baseline_decay) * reward
        self.updates += 1


class ReinforceSampler(ProposalSampler):
    """REINFORCE with a moving-average baseline and an optional entropy bonus (``entropy_weight``,
    0 by default: none unless set); single objective.

    >>> import optuna, spaces
    >>> space = spaces.Space({"genome": spaces.CellFamily()})
    >>> sampler = ReinforceSampler(space=space, seed=0)
    >>> study = optuna.create_study(sampler=sampler, direction="maximize")
    >>> for _ in range(5):
    ...     trial = study.ask()
    ...     _ = study.tell(trial, space.suggest(trial)["genome"].edges.count("nor_conv_3x3"))
    >>> sampler.policy(study).updates
    5
    """

    def __init__(
        self,
        *,
        space: spaces.Space,
        learning_rate: float = 0.3,
        entropy_weight: float = 0.0,
        baseline_decay: float = 0.7,
        bins: int = 8,
        importance_weights: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(space=space, seed=seed)
        if not learning_rate > 0:
            raise ValueError(f"learning_rate: must be > 0, got {learning_rate}")
        if not entropy_weight >= 0:
            raise ValueError(f"entropy_weight: must be >= 0, got {entropy_weight}")
        if not 0 <= baseline_decay < 1:
            raise ValueError(f"baseline_decay: must be in [0, 1), got {baseline_decay}")
        if bins < 2:
            raise ValueError(f"bins: must be >= 2, got {bins}")
        self._lr = learning_rate
        self._entropy = entropy_weight
        self._decay = baseline_decay
        self._bins = bins
        self._weights = importance_weights
        # per study: the trial numbers replayed so far (in order) and the policy they gave;
        # replaying updates that policy in place, so one thread at a time (optimize(n_jobs>1))
        self._lock = threading.Lock()
        # (and the rewards so far, sorted: each new one is ranked among them)
        self._replayed: dict[tuple[int, int], tuple[list[int], Policy, list[float]]] = {}

    def policy(self, study: Study) -> Policy:
        """The policy after replaying the study's COMPLETE trials (incrementally cached)."""
        with self._lock:
            return self._replay(study)

    def _replay(self, study: Study) -> Policy:
        done = complete_in_order(study)
        numbers, policy, seen = self._replayed.get(
            study_key(study), ([], Policy(self._bins), []))
        if [t.number for t in done[: len(numbers)]] != numbers:  # history changed: replay all
            numbers, policy, seen = [], Policy(self._bins), []
        s = sign(study)
        for t in done[len(numbers) :]:
            # Only the policy's own draws are its actions: a random fallback value is not.
            taken = {n: (t.distributions[n], v) for n, v in t.params.items()
                     if FALLBACK_ATTR + n not in t.system_attrs}
            policy.update(
                taken,
                rank_reward(seen, s * t.values[0]),
                learning_rate=self._lr,
                entropy_weight=self._entropy,
                baseline_decay=self._decay,
                weight=self._weight(policy, taken, t) if self._weights else 1.0,
            )
            numbers.append(t.number)
        self._replayed[study_key(study)] = (numbers, policy, seen)
        return policy

    @staticmethod
    def _weight(
        policy: Policy, taken: dict[str, tuple[BaseDistribution, Any]], trial: FrozenTrial
    ) -> float:
        """pi_now(draw) / pi_then(draw) over the decisions both know, clipped."""
        then = trial.system_attrs.get(LOGP_ATTR)
        if not isinstance(then, dict):
            return 1.0
        diff = 0.0
        for name, (dist, value) in taken.items():
            now = policy.log_probability(name, dist, value)
            if now is not None and isinstance(then.get(name), float | int):
                diff += now - float(then[name])
        return float(min(_RATIO, max(1 / _RATIO, math.exp(max(-50.0, min(50.0, diff))))))

    def propose(self, study: Study, trial: FrozenTrial, rng: np.random.Generator) -> dict[str, Any]:
        policy = self.policy(study)
        seen = self.seen_keys(study, exclude=trial._trial_id)  # noqa: SLF001
        recorder = draw(self._space, policy.choose, rng)
        for _ in range(_TRIES - 1):
            if candidate_key(self._space, recorder.params) not in seen:
                break
            recorder = draw(self._space, policy.choose, rng)
        if self._weights:
            logp = {
                name: policy.log_probability(name, recorder.distributions[name], value)
                for name, value in recorder.params.items()
            }
            study._storage.set_trial_system_attr(  # noqa: SLF001
                trial._trial_id, LOGP_ATTR, {k: v for k, v in logp.items() if v is not None}  # noqa: SLF001
            )
        return recorder.params


def rank_reward(seen: list[float], reward: float) -> float:
    """``reward``'s mid-rank among ``seen`` and itself, through the inverse normal CDF (0 for the
    median); ``reward`` joins ``seen`` (kept sorted)."""
    below = bisect.bisect_left(seen, reward)
    equal = bisect.bisect_right(seen, reward) - below
    bisect.insort(seen, reward)
    return float(probit(np.array([(below + 1 + equal / 2) / (len(seen) + 1)]))[0])
