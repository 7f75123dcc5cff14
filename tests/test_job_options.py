"""The table of job options (srift/job_options.py) against ``Job``, ``JobLength``, the commands that
take a job and the job file: an option in one of them but not the others fails here."""

from __future__ import annotations

import dataclasses

import pytest
import typer
import yaml

from srift import api
from srift.bounds import MAX_KFAC_INTERVAL
from srift.cli import command, main
from srift.commands.options import JOB, takes_job
from srift.errors import SriftError
from srift.job import Job, JobLength
from srift.job_options import JOB_OPTIONS, LENGTH, SETTINGS, JobOption, build_job
from srift.jobfile import load_jobfile

# A length option needs its partner, the factor interval an inverse interval it divides.
COMPANIONS = {"epochs": {"dataset_size": 1000}, "dataset_size": {"epochs": 2.5}, "kfac_factor_steps": {"kfac_inv_steps": 4},
              "micro_batch_size": {"layout": "auto"}, "pipeline_schedule": {"layout": "auto"},
              "virtual_stages": {"layout": "auto"}, "fp8": {"layout": "auto"}, "moe_dispatcher": {"layout": "auto"},
              "moe_ep_overlap": {"layout": "auto"}, "lora_rank": {"finetune": "lora"}, "lora_targets": {"finetune": "lora"},
              "quantize_head": {"finetune": "qlora"}, "optimizer_in_backward": {"finetune": "full"},
              "activation_offloading": {"finetune": "full"}, "cpu_offload": {"finetune": "full"},
              "varlen_attention": {"packed": True, "seq_len": 4096, "mean_seq_len": 512}}
# Words of a vocabulary that need a partner: Megatron's distributed optimizer is modelled with a layout.
WORD_COMPANIONS = {("parallelism", "zero1"): {"layout": "auto"},
                   ("cpu_offload", "params"): {"finetune": "full", "parallelism": "fsdp"}}
# What each command that takes a job takes: the settings, and the length where it has one.
COMMANDS = {"predict": SETTINGS, "recommend": SETTINGS + LENGTH, "check": SETTINGS + LENGTH}


def sample(option: JobOption) -> object:
    """A value of ``option`` other than its default (every Job accepts it alone)."""
    if option.choices:
        return next(c for c in option.choices if c != option.default)
    if option.kind == "text":
        return option.example
    return {"int": 2, "float": 2.5, "bool": not option.default}[option.kind]


def as_flags(values: dict[str, object]) -> list[str]:
    flags: list[str] = []
    for name, value in values.items():
        opt = next(o for o in JOB_OPTIONS if o.name == name)
        if opt.kind == "bool":
            flags.append(opt.flag if value else str(opt.negative_flag))
        else:
            flags += [opt.flag, str(value)]
    return flags


def given_in(job: Job, name: str) -> object:
    return getattr(job.length, name) if name in LENGTH else getattr(job, name)


def test_the_table_names_every_field_of_job_and_its_length_with_their_defaults():
    job_fields = {f.name: f.default for f in dataclasses.fields(Job) if f.name != "length"}
    length_fields = {f.name for f in dataclasses.fields(JobLength) if f.name != "seq_len"}  # seq_len: the job's own
    assert set(SETTINGS) == set(job_fields)
    assert set(LENGTH) == length_fields
    assert {o.name: o.default for o in JOB_OPTIONS if o.part == "setting"} == job_fields
    assert len({o.flag for o in JOB_OPTIONS}) == len(JOB_OPTIONS)


@pytest.mark.parametrize("option", JOB_OPTIONS, ids=lambda o: o.name)
def test_job_checks_each_option_as_the_table_says(option):
    """The vocabulary and bound in the table are what Job accepts (the --help and the job file quote them)."""
    companions = dict(COMPANIONS.get(option.name, {}))
    if option.choices:
        for word in option.choices:
            partners = {**companions, **WORD_COMPANIONS.get((option.name, word), {})}
            assert given_in(build_job({option.name: word, **partners}), option.name) == word
        with pytest.raises(SriftError, match="unknown"):
            build_job({option.name: "no-such-word", **companions})
    elif option.high is not None:
        if option.name == "kfac_factor_steps":
            companions["kfac_inv_steps"] = MAX_KFAC_INTERVAL  # the inverse interval is a multiple of it
        assert given_in(build_job({option.name: option.high, **companions}), option.name) == option.high
        above = option.high + 1 if option.kind == "int" else option.high * 2
        with pytest.raises(SriftError, match=option.flag):
            build_job({option.name: above, **companions})


def test_build_job_refuses_a_name_outside_the_table():
    with pytest.raises(ValueError, match="no_such_option"):
        build_job({"no_such_option": 8})
    assert build_job({}) == Job()


@pytest.fixture
def captured(monkeypatch, tmp_path):
    """Run a command up to the api call and return the Job it would predict."""
    seen: list[Job] = []

    class Stop(Exception):
        pass

    def grab(job, *args, **kwargs):
        seen.append(job if isinstance(job, Job) else job.job)  # check passes the JobFile
        raise Stop

    for name in ("predict", "recommend", "check"):
        monkeypatch.setattr(api, name, grab)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({"model": "resnet50", "instance": "g5.xlarge", "limits": {"max_cost_usd": 100}}))
    heads = {"predict": ["predict", "--model", "resnet50", "--instance", "g5.xlarge"],
             "recommend": ["recommend", "--model", "resnet50", "--budget", "20"],
             "check": ["check", str(job_file)]}

    def run(cmd: str, values: dict[str, object]) -> Job:
        seen.clear()
        with pytest.raises(Stop):
            command().main(args=heads[cmd] + as_flags(values), prog_name="srift", standalone_mode=False)
        return seen[0]

    return run


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_every_command_that_takes_a_job_takes_every_job_option(cmd, captured):
    for name in COMMANDS[cmd]:
        option = next(o for o in JOB_OPTIONS if o.name == name)
        values = {name: sample(option), **COMPANIONS.get(name, {})}
        if cmd == "check" and name not in LENGTH:
            values["steps"] = 1000  # the job file has no length
        assert given_in(captured(cmd, values), name) == sample(option), (cmd, name)


def test_predict_and_recommend_build_the_same_job_from_the_same_flags(captured):
    values = {"batch_size": 32, "precision": "bf16", "optimizer": "kfac", "kfac_strategy": "mpd",
              "kfac_factor_steps": 10, "kfac_inv_steps": 100, "parallelism": "ddp"}
    assert captured("predict", values) == dataclasses.replace(captured("recommend", values), length=None) == build_job(values)


def test_the_job_file_takes_every_job_option(tmp_path):
    for option in JOB_OPTIONS:
        values = {option.name: sample(option), **COMPANIONS.get(option.name, {})}
        if option.part == "setting":
            values["steps"] = 1000
        path = tmp_path / f"{option.name}.yaml"
        path.write_text(yaml.safe_dump({"model": "resnet50", **values, "limits": {"max_hours": 1}}))
        assert given_in(load_jobfile(str(path), env={}).job, option.name) == sample(option), option.name
        # and from its SRIFT_ variable, over the file
        env = {f"SRIFT_{option.name.upper()}": str(sample(option)).lower()}
        path.write_text(yaml.safe_dump({"model": "resnet50", **{k: v for k, v in values.items() if k != option.name},
                                        "limits": {"max_hours": 1}}))
        assert given_in(load_jobfile(str(path), env=env).job, option.name) == sample(option), option.name


def test_the_job_file_refuses_a_value_outside_an_options_bound(tmp_path):
    path = tmp_path / "srift.yaml"
    path.write_text("model: resnet50\nsteps: 10\nkfac_inv_steps: 2000000\nlimits: {max_hours: 1}\n")
    with pytest.raises(SriftError, match="kfac_inv_steps"):
        load_jobfile(str(path), env={})


def test_a_command_cannot_declare_a_job_option_of_its_own():
    def clash(job: Job = JOB, precision: str = typer.Option("fp32", "--precision")) -> None:
        """A command with its own --precision."""

    with pytest.raises(TypeError, match="precision"):
        takes_job(clash)


def test_check_flags_override_the_job_file(tmp_path, monkeypatch):
    path = tmp_path / "srift.yaml"
    path.write_text("model: resnet50\nsteps: 10\noptimizer: kfac\nkfac_strategy: naive\nlimits: {max_hours: 1}\n")
    seen: list[Job] = []

    def grab(jobfile, **kwargs):
        seen.append(jobfile.job)
        raise typer.Exit(0)

    monkeypatch.setattr(api, "check", grab)
    assert main(["check", str(path), "--kfac-strategy", "spd", "--kfac-inv-steps", "4"]) == 0
    assert (seen[0].optimizer, seen[0].kfac_strategy, seen[0].kfac_factor_steps, seen[0].kfac_inv_steps) == ("kfac", "spd", 1, 4)
