"""`srift examples`: what was copied where, and what to do next."""

from __future__ import annotations

from srift.examples import WORKFLOW, CopiedExamples


def show(result: CopiedExamples) -> None:
    """The files written and kept, then the next steps (the workflow's pin when still to fill in)."""
    where = result.dest
    if result.written:
        print(f"Copied {len(result.written)} file(s) into {where}/:")
        print("\n".join(f"  {rel}" for rel in result.written))
    if result.skipped:
        print(f"Kept {len(result.skipped)} existing file(s) (--force overwrites): {', '.join(result.skipped)}")
    steps = [f"srift predict --model resnet50 --cluster {where / 'configs/clusters/ib-64.yaml'}",
             f"srift check {where / 'configs/ci/srift.yaml'}"]
    if WORKFLOW in result.written:
        steps.append(f"mkdir -p .github/workflows && cp {where / WORKFLOW} .github/workflows/   (and srift.yaml at the root)")
        if result.pinned is not None:
            print(f"The workflow installs srift from {result.pinned[0]} at {result.pinned[1]}.")
        else:
            print(f"Before using the workflow, set SRIFT_REPO and SRIFT_REF at the top of {where / WORKFLOW} "
                  "(srift's repository and a commit you have reviewed), or rerun with --repo URL --ref COMMIT.")
    print("Next:\n" + "\n".join(f"  {s}" for s in steps))
