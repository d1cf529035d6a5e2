"""Cold-start data synthesis: generate dialogues, validate them twice, export the ones that pass.

One pipeline, three kinds of world, chosen by ``tools``:

- ``local`` on a muarl domain (default): real tools on a real state; the oracle agent with the scripted
  user makes demonstrations with no model at all, an ``openai:MODEL`` agent makes real ones;
- ``simulated`` on a scenario file (default for scenarios): a tool LLM answers each call in character;
- ``mcp:CMD`` / ``mcp:URL``: an MCP server runs the tools (a muarl domain served by ``muarl serve-mcp``,
  or, with a scenario file giving policy and tasks, any MCP server, its tools taken from ``list_tools``).

Generation reuses the rollout runner (concurrency, progress bar, each episode appended to
``episodes.jsonl`` as it ends, ``resume``). Then every dialogue gets a rules verdict and a judge verdict
(:mod:`muarl.synth.validate`), all stored in ``validation.jsonl``; the accepted ones are exported
(:mod:`muarl.synth.export`) and ``report.json`` counts rejections by reason.

Scenario episodes have no gold state to compare with, so they are scored ``unscored`` (reward 0 with
``details.unscored``), and the reward rule is skipped for them.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from muarl.config import ConfigError
from muarl.domains.base import Domain
from muarl.errors import InputError
from muarl.models.factory import make_agent
from muarl.rollout.backends import ToolBackend
from muarl.rollout.runner import run_many
from muarl.rollout.store import EPISODES_FILE, RUN_FILE, atomic_write_text, latest_per_key, read_episodes, write_run_info
from muarl.rollout.world import World, WorldConfig, build_world, make_backend_factory, make_world_user, select_tasks
from muarl.synth.export import export_sft, read_review, write_review
from muarl.synth.report import build_report, format_report
from muarl.synth.scenario import Scenario
from muarl.synth.validate import DialogueVerdict, LLMJudge, RuleConfig, StageVerdict, check_rules
from muarl.types import Episode, Message, RewardInfo, Task, ToolSpec

VALIDATION_FILE = "validation.jsonl"
REPORT_FILE = "report.json"
REVIEW_FILE = "review.jsonl"
TOOLS_FILE = "tools.json"  # the tool specs the dialogues were made with (exported with every line)

# read tools whose success identifies the user, per registered domain (scenarios name their own)
IDENTIFICATION_TOOLS: dict[str, list[str]] = {
    "clinic": ["find_patient_by_email", "find_patient_by_name_dob"],
    "tau-retail": ["find_user_id_by_email", "find_user_id_by_name_zip"],
    "tau2-retail": ["find_user_id_by_email", "find_user_id_by_name_zip"],
}


class SynthError(InputError):
    """Bad synthesis configuration; the message says what to change."""


class SynthConfig(WorldConfig):
    """A synthesis: the shared world section (a scenario file may stand in for the domain) plus the agent, the
    tool LLM, the judge and the export."""

    domain: str = Field("clinic", description="registered domain name or package.module:factory (ignored with scenario)")
    scenario: str | None = Field(None, description="scenario file (YAML/JSON: tool schemas, policy, seed DB, tasks) instead of a domain")
    split: str = Field("train", description="task split to synthesise from")
    allow_test_split: bool = Field(False, description="permit synthesising SFT data from a split named test (never for reported results)")
    agent: str = Field("oracle", description="oracle | openai:MODEL (with agent_base_url)")
    agent_base_url: str | None = Field(None, description="OpenAI-compatible endpoint of the agent")
    agent_api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the agent endpoint's key")
    temperature: float | None = Field(None, ge=0, description="agent sampling temperature")
    tools: str | None = Field(None, description="local | simulated | mcp:COMMAND | mcp:URL (default: local for a domain, simulated for a scenario)")
    tool_model: str | None = Field(None, description="model of the tool LLM (simulated tools)")
    tool_base_url: str | None = Field(None, description="OpenAI-compatible endpoint of the tool LLM")
    tool_api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the tool LLM endpoint's key")
    judge_model: str | None = Field(None, description="model of the LLM judge; without it the judge stage is skipped")
    judge_base_url: str | None = Field(None, description="OpenAI-compatible endpoint of the judge")
    judge_api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the judge endpoint's key")
    identification_tools: list[str] | None = Field(None, description="tools that identify the user (default: the domain's or scenario's)")
    require_confirmation: bool = Field(True, description="a write needs an affirmative last user message")
    trials: int = Field(1, ge=1, description="dialogues per task")
    concurrency: int = Field(8, ge=1, description="dialogues generated (and judged) at once")
    seed: int = Field(0, description="run seed (dialogue seeds and the train/validation split derive from it)")
    validation_fraction: float = Field(0.1, ge=0, lt=1, description="share of tasks (not dialogues) held out for validation")
    parquet: bool | None = Field(None, description="also write Parquet for verl (default: when pyarrow is installed)")
    human_review: bool = Field(False, description="write review.jsonl for a person to mark accept/reject")
    out: str = Field("runs/synth", description="output directory")
    resume: bool = Field(False, description="complete an interrupted synthesis in `out`")

    @model_validator(mode="after")
    def _check(self) -> SynthConfig:
        if self.split == "test" and not self.allow_test_split:
            raise ValueError("synthesising SFT data from split 'test' would train on the evaluation set; use split: train "
                             "(or --allow-test-split for a throwaway experiment)")
        return self


def unscored_reward(domain: Domain, task: Task, final_hash: str, messages: Sequence[Message], agent_turns: int = 0) -> RewardInfo:
    """For worlds without a gold state (scenarios): recorded, never a success."""
    return RewardInfo(reward=0.0, success=False, state_match=False, final_hash=final_hash, gold_hash="", details={"unscored": True})


def _chat_client(base_url: str | None, model: str | None, key_env: str, cfg: SynthConfig, what: str) -> Any:
    from muarl.models.openai_client import ChatClient

    if not base_url or not model:
        raise SynthError(f"the {what} needs both {what}_model and {what}_base_url (an OpenAI-compatible endpoint)")
    return ChatClient(base_url, model, api_key=os.environ.get(key_env), timeout=cfg.timeout, max_retries=cfg.max_retries,
                      concurrency=cfg.concurrency)


@dataclass
class SynthWorld(World):
    """The world dialogues are generated in, with the rules that validate them and the clients to close."""

    rules: RuleConfig = field(default_factory=RuleConfig)
    clients: list[Any] = field(default_factory=list)  # chat clients to close at the end (the tool LLM, the judge)

    async def aclose(self) -> None:
        await super().aclose()
        for client in self.clients:
            await client.aclose()


async def build_synth_world(cfg: SynthConfig) -> SynthWorld:
    """A registered domain's world is built by ``build_world``, as rollout and training build theirs; a scenario
    file's world (its own tools, policy and tasks, no gold state) is assembled here from the same parts."""
    scenario = Scenario.load(cfg.scenario) if cfg.scenario else None
    tools = cfg.tools or ("simulated" if scenario else "local")
    if tools not in ("local", "simulated") and not tools.startswith("mcp:"):
        raise SynthError(f"unknown tools backend {tools!r}: use local, simulated, mcp:COMMAND or mcp:URL")
    if scenario is None:
        if tools == "simulated":
            raise SynthError("tools 'simulated' needs a scenario file (--scenario); a domain's tools run locally or over MCP")
        world = SynthWorld(**vars(build_world(cfg.model_copy(update={"tools": tools}), cfg.concurrency)))
        ident = IDENTIFICATION_TOOLS.get(world.domain.name, [])
    else:
        if tools == "local":
            raise SynthError("a scenario has no local tools: use tools 'simulated' (a tool LLM) or an MCP server")
        world = await _scenario_world(cfg, scenario, tools)
        ident = scenario.identification_tools
    if cfg.identification_tools is not None:
        ident = cfg.identification_tools
    unknown = [n for n in ident if n not in world.domain.tools]
    if unknown:
        await world.aclose()
        raise SynthError(f"identification tools {unknown} are not tools of {world.domain.name}; it has {world.domain.tools.names()}")
    if not world.tasks:
        await world.aclose()
        raise SynthError(f"{world.domain.name}/{cfg.split} has no tasks to synthesise from")
    world.rules = RuleConfig(identification_tools=ident, require_confirmation=cfg.require_confirmation)
    return world


async def _scenario_world(cfg: SynthConfig, scenario: Scenario, tools: str) -> SynthWorld:
    domain = scenario.domain()
    clients: list[Any] = []
    if tools == "simulated":
        from muarl.synth.simulated_tools import SimulatedToolBackend

        client = _chat_client(cfg.tool_base_url, cfg.tool_model, cfg.tool_api_key_env, cfg, "tool")
        clients.append(client)

        def factory(d: Domain, task: Task) -> ToolBackend:
            return SimulatedToolBackend(d, client)
    else:  # any MCP server: its own tools, the scenario's policy and tasks
        from muarl.integrations.mcp_client import MCPTarget, list_tool_specs, remote_domain

        factory = make_backend_factory(tools, cfg.timeout, cfg.max_retries)
        specs, _ = await list_tool_specs(MCPTarget.parse(tools), timeout=cfg.timeout, max_retries=cfg.max_retries)
        domain = remote_domain(scenario.name, specs, scenario.policy, scenario.tasks_as_muarl(), domain.splits)
    try:
        tasks = select_tasks(cfg, domain)
    except ConfigError as exc:
        raise SynthError(str(exc)) from None
    resolved = cfg.for_domain(domain)  # a scenario's domain has the default turn budget and parallel calls
    return SynthWorld(resolved, domain, tasks, make_world_user(resolved, cfg.concurrency), factory, unscored_reward, resolved.loop_config(),
                      clients=clients)


def _parquet_wanted(cfg: SynthConfig) -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        if cfg.parquet:
            raise SynthError("parquet export needs pyarrow: pip install 'muarl[parquet]' (or pass --no-parquet)") from None
        return False
    return cfg.parquet is not False


def read_verdicts(path: Path) -> dict[str, DialogueVerdict]:
    if not path.exists():
        return {}
    verdicts = [DialogueVerdict.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {v.key: v for v in verdicts}


async def validate_all(
    episodes: Sequence[Episode], world: SynthWorld, judge: LLMJudge | None, known: dict[str, DialogueVerdict], concurrency: int,
) -> dict[str, DialogueVerdict]:
    """Verdicts for every episode, reusing ``known`` ones (a resumed run does not pay the judge twice)."""
    tasks = {t.id: t for t in world.tasks}
    semaphore = asyncio.Semaphore(concurrency)

    async def one(episode: Episode) -> DialogueVerdict:
        key = f"{episode.task_id}#{episode.trial}"
        if key in known:
            return known[key]
        task = tasks[episode.task_id]
        rules = check_rules(episode, world.domain, task, world.rules)
        if judge is None:
            verdict = StageVerdict(status="skipped", notes={"judge": "no judge endpoint configured"})
        else:
            async with semaphore:
                verdict = await judge.judge(episode, world.domain, task)
        return DialogueVerdict(task_id=episode.task_id, trial=episode.trial, rules=rules, judge=verdict)

    verdicts = await asyncio.gather(*(one(e) for e in episodes))
    return {v.key: v for v in verdicts}


def finish(out: Path, episodes: Sequence[Episode], verdicts: dict[str, DialogueVerdict], tools: Sequence[ToolSpec], cfg: SynthConfig,
           written: Sequence[str] = ()) -> dict[str, Any]:
    """Store verdicts, export accepted dialogues, write the report (and the review file when asked); the report's
    ``files`` names every file of ``out`` this run wrote: ``written`` (written before) and these."""
    atomic_write_text(out / VALIDATION_FILE, "".join(verdicts[f"{e.task_id}#{e.trial}"].model_dump_json() + "\n" for e in episodes))
    counts, exported = export_sft(episodes, verdicts, tools, out, validation_fraction=cfg.validation_fraction,
                                  seed=cfg.seed, parquet=_parquet_wanted(cfg))
    files = [*written, VALIDATION_FILE, *exported]
    if cfg.human_review:
        write_review(out / REVIEW_FILE, episodes, verdicts)
        files.append(REVIEW_FILE)
    report = {**build_report((verdicts[f"{e.task_id}#{e.trial}"] for e in episodes), counts), "files": [*files, REPORT_FILE]}
    atomic_write_text(out / REPORT_FILE, json.dumps(report, indent=2) + "\n")
    return report


async def synthesize(cfg: SynthConfig, progress: bool = True) -> dict[str, Any]:
    """Run the whole pipeline into ``cfg.out``; returns the report."""
    out = Path(cfg.out)
    if not cfg.resume and (out / EPISODES_FILE).exists() and (out / EPISODES_FILE).stat().st_size:
        raise SynthError(f"{out} already holds a synthesis: pass --resume to complete it, or choose another --out")
    _parquet_wanted(cfg)  # fail before generating, not after
    world = await build_synth_world(cfg)
    agent = make_agent(cfg.agent, base_url=cfg.agent_base_url, api_key_env=cfg.agent_api_key_env, timeout=cfg.timeout,
                       max_retries=cfg.max_retries, concurrency=cfg.concurrency, temperature=cfg.temperature)
    judge = None
    if cfg.judge_model or cfg.judge_base_url:
        judge_client = _chat_client(cfg.judge_base_url, cfg.judge_model, cfg.judge_api_key_env, cfg, "judge")
        world.clients.append(judge_client)
        judge = LLMJudge(judge_client)
    # the config as run: the domain's reward, turn budget and parallel calls where it sets none
    write_run_info(out, {"command": "synth", "config": world.config.model_dump(), "n_tasks": len(world.tasks)})
    try:
        await run_many(world.domain, world.tasks, agent, world.user, trials=cfg.trials, concurrency=cfg.concurrency,
                       out=out / EPISODES_FILE, resume=cfg.resume, seed=cfg.seed, config=world.loop,
                       reward_fn=world.reward_fn, backend_factory=world.backend_factory, progress=progress)
        episodes = latest_per_key(read_episodes(out / EPISODES_FILE)[0])
        known = read_verdicts(out / VALIDATION_FILE) if cfg.resume else {}
        verdicts = await validate_all(episodes, world, judge, known, cfg.concurrency)
    finally:
        await agent.aclose()
        await world.aclose()
    tools = world.domain.tools.specs()
    atomic_write_text(out / TOOLS_FILE, json.dumps([t.model_dump() for t in tools], indent=1) + "\n")
    return finish(out, episodes, verdicts, tools, cfg, written=[RUN_FILE, EPISODES_FILE, TOOLS_FILE])


def import_review(cfg: SynthConfig, review_path: str | Path) -> dict[str, Any]:
    """Apply a person's accept/reject decisions to a finished synthesis in ``cfg.out`` and export again."""
    out = Path(cfg.out)
    verdicts = read_verdicts(out / VALIDATION_FILE)
    if not verdicts:
        raise SynthError(f"{out} has no {VALIDATION_FILE}: run the synthesis first")
    decisions = read_review(Path(review_path))
    unknown = sorted(set(decisions) - set(verdicts))
    if unknown:
        raise SynthError(f"review {review_path} names dialogues not in {out}: {unknown[:5]}")
    for key, (decision, note) in decisions.items():
        verdicts[key].human, verdicts[key].human_note = decision, note
    episodes = [e for e in latest_per_key(read_episodes(out / EPISODES_FILE)[0]) if f"{e.task_id}#{e.trial}" in verdicts]
    tools = [ToolSpec.model_validate(t) for t in json.loads((out / TOOLS_FILE).read_text(encoding="utf-8"))]
    return finish(out, episodes, verdicts, tools, cfg)


__all__ = ["SynthConfig", "SynthError", "format_report", "import_review", "synthesize"]
