"""stoker reading the transforms workload's columns without transforms (the ops' baseline)."""

from __future__ import annotations

from ..transforms import cat_names, float_names

NAME = "xform_stoker_plain"
WORKLOADS = ("tabular-xform",)


def available():
    try:
        import stoker  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"import stoker failed: {error}"
    return None


def options(job):
    return dict(features=float_names(), columns=cat_names() + ["tags", "label"], lists="padded",
                batch_size=job["batch_size"], seed=job["seed"], drop_last=False,
                num_threads=job["threads"], output="torch", rank=0, world_size=1)


def config(job):
    return {"api": "stoker.Loader", "features": "200 float32 -> [B, 200] (raw)",
            "strings": "20 columns as delivered without transforms", "tags": "padded",
            **{k: v for k, v in options(job).items() if k not in ("features", "columns")}}


def batches(job):
    import stoker

    with stoker.Loader(job["path"], **options(job)) as loader:
        for batch in loader:
            yield len(batch["label"]), batch
