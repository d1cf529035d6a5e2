"""The benchmark data muarl can fetch: each benchmark's public files, pinned to an upstream commit, with checksums.

A benchmark's files are kept in one folder (``tau-bench/``, ``tau2-bench/``, ``acebench/``) under a data
directory, in the layout the domains read (:mod:`muarl.domains.tau.loader`, :mod:`muarl.domains.acebench`).
Each file is pinned by where it comes from (repository, commit, path) and by the SHA-256 and size of the file as
kept. Most are kept byte for byte; τ-bench's task files are Python source upstream and are kept as the JSON list
their ``Task(...)`` literals spell (read with :mod:`ast`, never run; see :func:`muarl.data.pull.tau_tasks_json`),
its ``wiki.md`` as ``policy.md``.

The pins were chosen to match the data muarl's tests and recorded results were made with:

* τ-bench: the repository's latest commit; every kept file equals its upstream source (task files converted).
* τ²-bench: release v1.0.1, except ``telecom/tasks.json``, which is taken from release v0.2.0: the 114 base tasks
  muarl's telecom world is built and checked against (later releases put the full generated set under that
  name). τ²'s airline world uses τ-bench's airline tables, so it needs ``tau-bench`` as well.
* ACEBench: the repository's latest commit; its English data.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

Convert = Literal["tau_tasks"]


@dataclass(frozen=True)
class PinnedFile:
    path: str  # where it is kept, under the benchmark's folder
    sha256: str  # of the kept file
    size: int
    upstream: str  # its path in the upstream repository
    commit: str  # the upstream commit it is taken from
    convert: Convert | None = None  # how the upstream file becomes the kept one (None: a byte copy)


@dataclass(frozen=True)
class Benchmark:
    name: str  # its folder, and the name `muarl data pull` takes
    repo: str  # upstream GitHub repository, owner/name
    commit: str  # the commit most files are pinned to
    files: tuple[PinnedFile, ...]
    note: str = ""  # what a user should know (another benchmark it needs)

    @property
    def version(self) -> str:
        return f"{self.repo}@{self.commit[:7]}"

    @property
    def digest(self) -> str:
        """One checksum for the whole pinned set (see :func:`tree_digest`)."""
        return tree_digest({f.path: f.sha256 for f in self.files})


def tree_digest(checksums: dict[str, str]) -> str:
    """SHA-256 over ``"<sha256>  <path>"`` lines in path order: one checksum for a set of files."""
    lines = "".join(f"{checksums[p]}  {p}\n" for p in sorted(checksums))
    return hashlib.sha256(lines.encode()).hexdigest()


def _pins(commit: str, upstream_of, entries, overrides: dict[str, str] | None = None) -> tuple[PinnedFile, ...]:
    """The pinned files of one benchmark: ``upstream_of(path)`` gives (upstream path, conversion); ``overrides`` maps
    a path to a commit of its own."""
    pins = []
    for path, sha, size in entries:
        upstream, convert = upstream_of(path)
        pins.append(PinnedFile(path, sha, size, upstream, (overrides or {}).get(path, commit), convert))
    return tuple(pins)


def _tau_upstream(path: str) -> tuple[str, Convert | None]:
    if path == "LICENSE":
        return path, None
    domain, name = path.split("/")
    envs = f"tau_bench/envs/{domain}"
    if name == "policy.md":
        return f"{envs}/wiki.md", None
    if name.startswith("tasks_"):
        return f"{envs}/{name.removesuffix('.json')}.py", "tau_tasks"
    return f"{envs}/data/{name}", None


TAU_COMMIT = "59a200c6d575d595120f1cb70fea53cef0632f6b"
TAU2_COMMIT = "fc0055dc4e0a316c3f83133267fbd6faaa770992"  # release v1.0.1
TAU2_V020 = "f8de30c298689cbe0117d76a378e7315a17e5bd8"  # release v0.2.0
ACEBENCH_COMMIT = "e6db74b735ead22c24f27367606a9408573b848f"

BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("tau-bench", "sierra-research/tau-bench", TAU_COMMIT, _pins(TAU_COMMIT, _tau_upstream, [
        ("LICENSE", "243d23d45b80122b5ac575586ccef352fdc9c45e6d7d2605449aca8a17478b42", 1063),
        ("airline/flights.json", "444d7565c68434a3e3fb72efd717f9f9cd5c56dce227f6f56e078f1cb0ed233a", 2114218),
        ("airline/policy.md", "56c335801c16e26b54f600f9db99eb04d31db477e86eb160341d5c66b796c5c8", 6155),
        ("airline/reservations.json", "1cf0bbc58ad984be9de7c24dba6dd27393f94cdbd482d8524f6a54db1f561a8c", 2325594),
        ("airline/tasks_test.json", "ae2fe26b9f1188ad98f4edcb7d82c4cf26152341a3d5bd2374e1154336d99bc3", 58785),
        ("airline/users.json", "bd264e2a31e0fa35cdfef8987e70a0dd3776828b582fe90e7a44823a12eb4cea", 595947),
        ("retail/orders.json", "2598a12586d28f2d6bd16bc86f4c800029b6af18e0abb5c475ef5c869c11ced1", 1810945),
        ("retail/policy.md", "d539fd2a46a8b8dd2e934ff9ed92f43e9f6b56bc7a718db8d2803ba8ad8f6bf7", 5718),
        ("retail/products.json", "a9eabcc1a9742c5f5288c2779acce52b9308423383ed24706bbaf0889f762a0f", 172258),
        ("retail/tasks_dev.json", "2f21d5de72a2b984122f26678ce47c6f4e09733ecc78f28e4bc990139295cceb", 16546),
        ("retail/tasks_test.json", "2c94feb5fa4b8b38973dbd0f4e7cac0f505ac54ab08f40721a1961b5a69cb2cb", 146640),
        ("retail/tasks_train.json", "27eb28aff6953902560006b4a2bb4a5c9e2be982813b90e82189dd2c8552fb26", 388324),
        ("retail/users.json", "6f4fd104cc5e80b92166c4035315c31532c6cea52a90dcdf18425ee7f87c2b82", 322932),
    ])),
    Benchmark("tau2-bench", "sierra-research/tau2-bench", TAU2_COMMIT, _pins(TAU2_COMMIT, lambda p: (p if p == "LICENSE" else f"data/tau2/domains/{p}", None), [
        ("LICENSE", "e67c5aa0074dfcaefd3c3a1aedb94cb539234aecd15d5a972574e3200e6252fe", 1072),
        ("airline/policy.md", "10dc0525421521208be39cee235bba84a16e2bcba9899eb93d92cd81d2f62fc4", 7676),
        ("airline/split_tasks.json", "b22ced4d9a9850ac9aea31c53bdcb6d6009058140bd9acc7db37c1d36222ba8b", 1443),
        ("airline/tasks.json", "ccd8ba737b4cc371415af70151187788f728d6108d0916e73bb4317b40542052", 155528),
        ("retail/db.json", "413a65160adbdb5fde0ffc0015c49b6d70250b10c18128de169b597af7766765", 2811616),
        ("retail/policy.md", "2c9652afbce57d6e087768d37cda64d31c53d50b3e3225cfdb791bac66466467", 6699),
        ("retail/split_tasks.json", "ed0580ec52575b63fbf76568af42490da6ee7783ecb4aa81af46961291358f20", 3263),
        ("retail/tasks.json", "8e03ebce7901bd6218e7a7dc3105faa9324091a68058f7fe61c65262868812e8", 345982),
        ("telecom/db.toml", "562d647ef9d7df8df91eafd8ee76036e707c8f9e32aaedc4a7fde06975aea2c0", 9628),
        ("telecom/main_policy.md", "95943844a0cf11fdf0e2842b483b81d9f9338aa53235712ed131db075d086ed7", 5699),
        ("telecom/split_tasks.json", "605b488bb9a6acb3c7f4505240a855fdc8681d09aadb16a8f38b2efcfc5c3aec", 356149),
        ("telecom/tasks.json", "192a2c143b3b512c37c3775fdf6c5040c33717388620c38b140c731dc6153cd7", 659069),
        ("telecom/tasks_small.json", "c8ea6f75adc18a8ad363974292cbd26b6e8b0e348ec87d265a4188e0088a8f24", 83833),
        ("telecom/tech_support_manual.md", "015a3ee49ec8c199c5e1a059c922081937b92cf3a5ea74fedbc4357816f389ba", 17589),
        ("telecom/tech_support_workflow.md", "64f3ccd13875d14f358b21b9af221dab09e0e7bf5690d0e4322fb91855a43a4d", 16390),
        ("telecom/user_db.toml", "4886107ea0c16f8e16d74bef91cfb557de61822afe9361f5a9b241806aea2e4c", 933),
    ], overrides={"telecom/tasks.json": TAU2_V020}), note="tau2-airline also needs tau-bench (τ²'s airline world uses its tables)"),
    Benchmark("acebench", "ACEBench/ACEBench", ACEBENCH_COMMIT, _pins(ACEBENCH_COMMIT, lambda p: (p if p == "LICENSE.md" else f"data_all/{p}", None), [
        ("LICENSE.md", "d9a1b1e30d633d5732ea18e3cba9538d293ebc53e1a9e4e96ab739e0c5c4f1cb", 1140),
        ("data_en/data_agent_multi_step.json", "c04b7561a2a5b31b3c4fd3067807ab4e0a7907f5a72cd5ec987da3469eac1fe9", 102546),
        ("data_en/data_agent_multi_turn.json", "0380631f379510fad4aab885b9679cfe99e66cf3a01e92f570f9180141f637d0", 149522),
        ("data_en/data_normal_atom_bool.json", "59695e59c0d92cd22ec418bfd6f936d0d44a8d6e1fc16e6cb033b12213c57b0b", 300243),
        ("data_en/data_normal_atom_enum.json", "a2e870f8ba23687ba182a2bb0bdba0a7e02c21b67f3ebc5cc07a71fc2007d31b", 315211),
        ("data_en/data_normal_atom_list.json", "dd1388f66a25f6ff04a6c32abaa63a031ffa33a1aa15a55efe95b0d77ec78b52", 307528),
        ("data_en/data_normal_atom_number.json", "eba9d748fcd08f142abf053fe2eecc573c98232f218ff412eb9ea5350abca422", 305558),
        ("data_en/data_normal_atom_object_deep.json", "2df8cd21fcf7388ee4fa0d98f0587292ba4c14b7c8bde059b3dca18ad885d1ec", 235340),
        ("data_en/data_normal_atom_object_short.json", "eef597c5400e17e1c23a7548505e48139a3648d6e5bd5feabbc9b12fcf7a1a76", 187041),
        ("data_en/data_normal_multi_turn_user_adjust.json", "b05dd0fe2afb02270ecbdfddfc7a8b1606339c234d5098749742e79bc51ea8cc", 403725),
        ("data_en/data_normal_multi_turn_user_switch.json", "3ed94d09401c53a99c23edc8b60ebfda8d4ae486f9bea19f87b6000a66588cf0", 616616),
        ("data_en/data_normal_preference.json", "61413bbfb5f94b3ad74f348d9f33c8c10b531dfcf6e5429caa3f1a91fa64252d", 360015),
        ("data_en/data_normal_similar_api.json", "f3ae38a6b56ab27c47bd929f16468598636ff76ecc095ff60c41c8b5a9ee843f", 105610),
        ("data_en/data_normal_single_turn_parallel_function.json", "7b9b9200cf5224e93f20bf14f076bead8e75d451a7dd6956d346fb1200412235", 364550),
        ("data_en/data_normal_single_turn_single_function.json", "8505410b642c2ba70c2085e29e5bb4879b3ccd0c4a96be4a1fd3c806cbb501e7", 377260),
        ("data_en/data_special_error_param.json", "3ce0f322934d8a8a96eb8bae945949f61c53b74505ba0d65c4850f98e8ba3bae", 99795),
        ("data_en/data_special_incomplete.json", "186f593f8f2be7e709c5878f57d23f401c51e326ffcadcd62f9c5c08c8e34f3b", 183613),
        ("data_en/data_special_irrelevant.json", "20bb62a9c48b1daf852870096f5d70d53a09a07b8f90a7c09815c6d934e8f41e", 175451),
        ("data_en/possible_answer/data_agent_multi_step.json", "7086bf7d704e1ce2426cfbd63606a7a00fc92aab77d9973517a5536883e3c179", 43354),
        ("data_en/possible_answer/data_agent_multi_turn.json", "ad077af54920d614438c28b3c7483d556b1a732d0dd0973c867e497c7c0a828b", 59156),
        ("data_en/possible_answer/data_normal_atom_bool.json", "16c5c8d009d37a0dd5e398838c62857ad2ebae1eb0c0ee1a52eed39a654df86e", 7810),
        ("data_en/possible_answer/data_normal_atom_enum.json", "bdfec87c5fd4bc3608cb88c53c1d7eacc4e76eb6f73e738451fbff4252292a92", 7498),
        ("data_en/possible_answer/data_normal_atom_list.json", "d0c47a90f93ad48b505355290750e4a6c307cc59f535ab34d1947a3e60418eb9", 7966),
        ("data_en/possible_answer/data_normal_atom_number.json", "a95aca7f2e986280a361f0050d2f8ab02fa24ed5dc1cd2f8ddad5a5279459e8b", 6825),
        ("data_en/possible_answer/data_normal_atom_object_deep.json", "bf681a1cd84fb286562f3ba57ce9d28946a7cdcf8661b2aad125d69d4beecab7", 18865),
        ("data_en/possible_answer/data_normal_atom_object_short.json", "27d5cb55dd364c493cc5e2452e208e7a0da8ee55bfbb12133b14250683cdd920", 13223),
        ("data_en/possible_answer/data_normal_multi_turn_user_adjust.json", "a570117cde521c5d1c16adc2d461b8845c969a3334192bd357dec13cf6657889", 31810),
        ("data_en/possible_answer/data_normal_multi_turn_user_switch.json", "ca0c10778a899fecd3b9767dae7d188d9924a0dbb191e2e6bc0b5808b8baa37e", 27345),
        ("data_en/possible_answer/data_normal_preference.json", "ed9da0b58446812e8be562fb0594989bd759c249c1cdcd722a9dee5e89ee6644", 10053),
        ("data_en/possible_answer/data_normal_similar_api.json", "0976f8fd3f11b9d5ba3783dc746158aeea3fdb1b34a46b07f3c4c731375a8543", 9993),
        ("data_en/possible_answer/data_normal_single_turn_parallel_function.json", "fac555edad6f61927093504f10bdaef3cf54fbd587affcf3ce52b9f4ec0d3aa0", 59435),
        ("data_en/possible_answer/data_normal_single_turn_single_function.json", "e541ad06ecaf49310105209222b9788711cc15d684174276f56224e584b8589d", 31354),
        ("data_en/possible_answer/data_special_error_param.json", "5e4c8b8ca768d65372fac1e54c16ef90bf6c8869b8163a00a4afcc47867249b8", 4032),
        ("data_en/possible_answer/data_special_incomplete.json", "4792432c4883846e4ab46ea30cd98a78f5d65bef5f5eeae3e31c528985dd31bd", 6000),
        ("data_en/possible_answer/data_special_irrelevant.json", "cd3f1d66e554869e8870677acc07df78c6ebf8bbba6e600cbb825072181566b8", 5990),
    ])),
)}
