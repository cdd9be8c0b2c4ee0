"""One rank of a small job whose loop a framework owns, with the client's
callback as its only cudackpt code (MODE ``lightning``: a PyTorch
Lightning Trainer with the DDP strategy; ``transformers``: the
transformers Trainer, through accelerate's DDP). tests/test_frameworks.py
drives it on CPU (gloo), the GPU suite on GPUs (DEVICE=cuda: NCCL, one GPU
a rank). The model and data are the same in both, seeded.

Arguments: MODE STEPS LOG (``{RANK}`` in LOG: one command line for every
rank). It logs each step's loss (float.hex) and how long the step took
(``took=STEP SECONDS``, from the framework's step-begin hook), how many drains it went
through, the TCP sockets it held at the start and at each release (gloo's
pairs: the proof that the old communicators are gone), whether the
process group the framework's DDP holds at the end is the one it held at
the first step, and whether that group is registered with torch."""

import atexit
import os
import shutil
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import cudackpt_drain
from ranks import tcp_sockets

DEVICE = os.environ.get("DEVICE", "cpu")
WIDTH = 32


def network():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    )


def samples(steps, world):
    """Every rank's batches: 16 a step, for `steps` steps."""
    generator = torch.Generator().manual_seed(1000)
    return torch.randn(steps * 16 * world, WIDTH, generator=generator)


class Record:
    """What the rank logs, shared by both frameworks."""

    def __init__(self, path):
        self.log = open(path, "a", buffering=1)
        self.log.write(f"pid={os.getpid()}\n")
        self.sockets = []
        self.group = None
        self.step = 0
        self.started_at = None
        self.drains = 0
        # Counted at each release, before the caches go: by then every
        # group's communicators are down.
        original = cudackpt_drain.Drain.release_cache

        def counted(drain):
            self.sockets.append(tcp_sockets())
            original(drain)

        cudackpt_drain.Drain.release_cache = counted

    def started(self, group):
        self.group = group
        self.log.write(f"sockets_at_start={tcp_sockets()}\n")

    def step_begins(self, callback):
        drains = callback.drain.drains if callback.drain is not None else 0
        if drains > self.drains:
            self.log.write(f"drained_at={self.step - 1}\n")
            self.drains = drains
        self.started_at = time.perf_counter()

    def loss(self, value):
        if self.started_at is not None:
            self.log.write(f"took={self.step} {time.perf_counter() - self.started_at:.6f}\n")
        self.log.write(f"step={self.step} loss={float(value).hex()}\n")
        self.step += 1
        time.sleep(float(os.environ.get("STEP_SECONDS", "0.005")))

    def finished(self, group, drains):
        self.log.write(f"drains={drains}\n")
        self.log.write(f"sockets_after_release={','.join(map(str, self.sockets[::2]))}\n")
        # The group the framework's DDP holds is the one it held at the
        # first step, and still the job's default group.
        same = group is self.group and group is dist.distributed_c10d._get_default_group()
        self.log.write(f"same_groups={same}\n")
        name = getattr(group, "group_name", "")
        self.log.write(f"registered={dist.distributed_c10d._resolve_process_group(name) is group}\n")
        self.log.write(f"backend={dist.get_backend(group)}\n")
        self.log.close()


def lightning(steps, record):
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl
    from cudackpt_drain.lightning import DrainCallback  # installs the client

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = network()

        def training_step(self, batch, index):  # noqa: ARG002
            return (self.net(batch) ** 2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, foreach=False)

    class Logged(pl.Callback):
        def on_train_batch_start(self, trainer, module, batch, index):  # noqa: ARG002
            record.step_begins(drain)

        def on_train_batch_end(self, trainer, module, outputs, batch, index):  # noqa: ARG002
            if record.group is None:
                wrapped.append(trainer.strategy.model)  # DDP; unwrapped again after fit()
                record.started(trainer.strategy.model.process_group)
            record.loss(outputs["loss"].item())

    world = int(os.environ["WORLD_SIZE"])
    wrapped = []
    drain = DrainCallback()
    trainer = pl.Trainer(
        accelerator="gpu" if DEVICE == "cuda" else "cpu",
        devices=world,
        strategy="ddp",
        max_steps=steps,
        max_epochs=1,
        callbacks=[Logged(), drain],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
    )
    loader = torch.utils.data.DataLoader(samples(steps, world), batch_size=16, shuffle=False)
    trainer.fit(Net(), loader)
    record.finished(wrapped[0].process_group, drain.drain.drains)


def transformers_trainer(steps, record):
    # LATE=1: the callback imported after TrainingArguments started the
    # process group, as a user might: the callback must refuse.
    late = os.environ.get("LATE") == "1"
    if not late:
        from cudackpt_drain.transformers import DrainCallback  # installs the client: before TrainingArguments
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = network()
            self.last_loss = None

        def forward(self, x):
            loss = (self.net(x) ** 2).mean()
            self.last_loss = loss.detach()
            return {"loss": loss}

    class Logged(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ARG002
            record.step_begins(drain)

        def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ARG002
            if record.group is None:
                record.started(trainer.model_wrapped.process_group)
            record.loss(model.last_loss.item())

    world = int(os.environ["WORLD_SIZE"])
    output = tempfile.mkdtemp(prefix="cudackpt-trainer-")
    # Removed however the rank ends: a late callback refuses by raising.
    atexit.register(shutil.rmtree, output, True)
    args = TrainingArguments(
        output_dir=output,
        per_device_train_batch_size=16,
        max_steps=steps,
        learning_rate=0.05,
        optim="sgd",
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,
        warmup_steps=0,
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
        use_cpu=DEVICE != "cuda",
        ddp_backend="nccl" if DEVICE == "cuda" else "gloo",
        seed=0,
        data_seed=0,
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
    )
    data = [{"x": row} for row in samples(steps, world)]
    if late:
        from cudackpt_drain.transformers import DrainCallback
    drain = DrainCallback()
    trainer = Trainer(model=Net(), args=args, train_dataset=data, callbacks=[Logged(), drain])
    trainer.train()
    record.finished(trainer.model_wrapped.process_group, drain.drain.drains)


def main():
    mode, steps = sys.argv[1], int(sys.argv[2])
    record = Record(sys.argv[3].replace("{RANK}", os.environ.get("RANK", "0")))
    if DEVICE == "cuda":
        torch.use_deterministic_algorithms(True)
    if mode == "lightning":
        lightning(steps, record)
    elif mode == "transformers":
        transformers_trainer(steps, record)
    else:
        raise SystemExit(f"unknown mode {mode}")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
