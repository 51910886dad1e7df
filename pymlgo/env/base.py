"""What both environments share: modules, spaces from the header, the episode loop.

An episode is one corpus module compiled by the real compiler with the agent answering
every channel observation. `reset` starts the compiler and returns the first observation;
`step(action)` sends the answer and returns the next one; the episode terminates when the
compiler has finished, with the whole reward on the last step (no reward travels on the
channel: the object is measured after the compile). A module the compiler asks nothing
about yields an all-zero observation at `reset`, flagged `info["no_decisions"]`; the next
step then just finishes the compile.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from pymlgo.corpus.format import Corpus, load_corpus
from pymlgo.env.session import CompilerSession
from pymlgo.problems.base import CompileJob
from pymlgo.protocol.channel import ChannelError
from pymlgo.protocol.log import Header, Observation
from pymlgo.protocol.tensor_spec import TensorSpec
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC

DEMO_CORPUS = "demo"


@dataclass(frozen=True)
class EnvConfig:
    """timeout: seconds the compiler may take per request (and for the final compile
    phase); header_probes: modules tried when reading the feature header at construction;
    size_metric: what the episode's size counts (`toolchain.size`)."""

    timeout: float = 300.0
    header_probes: int = 5
    size_metric: str = DEFAULT_SIZE_METRIC


def load_jobs(
    corpus: str | Path | Corpus | None,
    jobs: Sequence[CompileJob] | None,
    modules: Sequence[str] | None,
    level: str = "-Oz",
) -> tuple[CompileJob, ...]:
    """The env's modules: given `jobs`, or a corpus ("demo": recorded at `level`, a
    directory or a `Corpus`), optionally restricted to `modules`."""
    if jobs is not None:
        if corpus is not None:
            raise ValueError("pass either corpus or jobs, not both")
        out = tuple(jobs)
        if modules is not None:
            wanted = set(modules)
            out = tuple(j for j in out if j.module in wanted)
    else:
        if corpus is None:
            raise ValueError("an environment needs a corpus (a directory, 'demo') or jobs")
        if isinstance(corpus, Corpus):
            loaded = corpus
        elif str(corpus) == DEMO_CORPUS and not Path(corpus).exists():
            from pymlgo.corpus.demo import ensure_demo_corpus

            loaded = load_corpus(ensure_demo_corpus(progress=False, level=level))
        else:
            loaded = load_corpus(corpus)
        if modules is not None:
            loaded = loaded.subset(modules)
        out = tuple(CompileJob(m.name, m.read_bitcode(), m.cmd) for m in loaded.modules)
    if not out:
        raise ValueError("the environment has no modules")
    return out


def box(spec: TensorSpec) -> spaces.Box:
    """The space of one tensor: its dtype's whole finite range (features are raw values)."""
    dtype = spec.dtype
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return spaces.Box(low=info.min, high=info.max, shape=spec.shape, dtype=dtype)


class CompilerEnv(gym.Env[dict[str, np.ndarray], np.int64]):
    """Base class: subclasses give the compile command, the action space and the reward."""

    metadata: dict[str, Any] = {"render_modes": []}
    opt_level = "-Oz"  # the level the env compiles at, so the demo corpus recorded at it

    def __init__(
        self,
        corpus: str | Path | Corpus | None = None,
        *,
        jobs: Sequence[CompileJob] | None = None,
        modules: Sequence[str] | None = None,
        clang: str | None = None,
        compiler: Compiler | None = None,
        config: EnvConfig = EnvConfig(),
    ) -> None:
        super().__init__()
        self.config = config
        self.compiler = compiler if compiler is not None else find_compiler(clang)
        self.jobs = load_jobs(corpus, jobs, modules, self.opt_level)
        self._by_name = {j.module: j for j in self.jobs}
        self._session: CompilerSession | None = None
        self._job: CompileJob | None = None
        self._steps = 0
        self._done = True
        self.header = self._probe_header()
        self._observed = [s for s in self.header.features if s.name not in self.hidden_features]
        self._at = {s.name: i for i, s in enumerate(self.header.features)}
        self.observation_space = spaces.Dict({s.name: box(s) for s in self._observed})
        self.action_space = self.make_action_space(self.header)

    # -- what a problem defines ------------------------------------------------------

    hidden_features: tuple[str, ...] = ()  # header features reported in info, not observed

    @abstractmethod
    def command(self, job: CompileJob, session: CompilerSession) -> list[str]:
        """The compiler's argv for `job` with the channel at `session.base`."""

    @abstractmethod
    def make_action_space(self, header: Header) -> spaces.Discrete: ...

    @abstractmethod
    def action_mask(self, obs: Observation | None) -> np.ndarray: ...

    @abstractmethod
    def default_action(self, obs: Observation) -> int | None: ...

    @abstractmethod
    def to_advice(self, action: int, obs: Observation) -> tuple[int, bool]:
        """(advice to send, whether `action` was invalid and had to be corrected)."""

    @abstractmethod
    def final_info(self, job: CompileJob, session: CompilerSession) -> tuple[float, dict[str, Any]]:
        """After a successful compile: (reward, info with sizes/costs)."""

    # -- gymnasium API ---------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Starts the compiler on `options["module"]`, else a module drawn with the env's
        seeded generator; returns the first observation."""
        super().reset(seed=seed)
        self._end_session()
        name = (options or {}).get("module")
        if name is None:
            job = self.jobs[int(self.np_random.integers(len(self.jobs)))]
        else:
            try:
                job = self._by_name[str(name)]
            except KeyError:
                raise ValueError(f"no module {name!r} in this environment") from None
        self._job, self._steps, self._done = job, 0, False
        self._session = session = CompilerSession(timeout=self.config.timeout)
        try:
            session.start(self.command(job, session))
            obs = session.next_observation()
        except BaseException:
            self._end_session()
            raise
        info = self._step_info(obs)
        if obs is None:
            info["no_decisions"] = True
        return self._observation(obs), info

    def step(
        self, action: Any
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self._done or self._session is None or self._job is None:
            raise RuntimeError("call reset() before step(); the episode has ended")
        session = self._session
        pending = session.pending
        corrected, sent = False, None
        try:
            if pending is not None:
                advice, corrected = self.to_advice(int(np.asarray(action).reshape(())), pending)
                sent = int(session.answer(advice).reshape(-1)[0])
                self._steps += 1
                obs = session.next_observation()
                if obs is not None:
                    info = self._step_info(obs)
                    info.update(corrected_action=corrected, sent_action=sent)
                    return self._observation(obs), 0.0, False, False, info
            res = session.finish()
        except (ChannelError, OSError) as exc:
            return self._fail(f"channel: {exc}")
        except Exception:
            self._end_session()
            raise
        if res.returncode != 0:
            tail = " | ".join(res.stderr.strip().splitlines()[-5:])
            return self._fail(f"compiler exited with {res.returncode}: {tail}")
        reward, info = self.final_info(self._job, session)
        info.update(self._step_info(None), corrected_action=corrected, sent_action=sent)
        self._end_session()
        return self._observation(None), reward, True, False, info

    def close(self) -> None:
        """Kills a running compiler and removes its FIFOs and temp dir."""
        self._end_session()
        super().close()

    # -- helpers ---------------------------------------------------------------------

    @property
    def module(self) -> str | None:
        return None if self._job is None else self._job.module

    @property
    def session(self) -> CompilerSession | None:
        """The running compile (for inspection: its process, temp dir and FIFOs)."""
        return self._session

    def _fail(self, error: str) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        info = self._step_info(None)
        info["error"] = error
        self._end_session()
        return self._observation(None), 0.0, True, False, info

    def _end_session(self) -> None:
        self._done = True
        if self._session is not None:
            self._session.close()
            self._session = None

    def _step_info(self, obs: Observation | None) -> dict[str, Any]:
        session = self._session
        info: dict[str, Any] = {
            "module": self.module,
            "context": session.context if session is not None else "",
            "decisions": self._steps,
            "action_mask": self.action_mask(obs),
            "default_action": None if obs is None else self.default_action(obs),
        }
        if obs is not None:
            for name in self.hidden_features:
                if name in self._at:
                    info[name] = obs.tensors[self._at[name]].copy()
        return info

    def _observation(self, obs: Observation | None) -> dict[str, np.ndarray]:
        if obs is None:  # terminal or empty: zeros, still inside the space
            return {s.name: np.zeros(s.shape, dtype=s.dtype) for s in self._observed}
        return {s.name: np.array(obs.tensors[self._at[s.name]]) for s in self._observed}

    def _probe_header(self) -> Header:
        """The feature header, read by starting the compiler on a module and killing it
        once the header arrived (a module that asks nothing is skipped)."""
        errors = []
        for job in self.jobs[: self.config.header_probes]:
            with CompilerSession(timeout=self.config.timeout) as session:
                session.start(self.command(job, session))
                try:
                    session.next_observation()
                except ChannelError as exc:
                    errors.append(f"{job.module}: {exc}")
                    continue
                if session.header is not None:
                    return session.header
                errors.append(f"{job.module}: the compiler asked nothing")
        raise ChannelError("could not read the channel header: " + "; ".join(errors))
