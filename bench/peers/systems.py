"""One image system's run, in its own process: bench/peers/peers.py starts

    systems.py SYSTEM --data DIR --setting N --dtype uint8|f32 [--epochs E]

with the venv's python (tf's own venv for tf-*), on the two cores it
measures. The process is the training process: it iterates the system's
batches ([B,224,224,3] uint8, or normalized [B,3,224,224] float32) for E
epochs and hands each to Probe, which keeps what the checks need (shapes,
dtypes, each sample's key and label, a subsampled per-channel mean). It
prints "PEERS {json}" lines: {"event": "mark"} at the first batch of each
epoch (the harness samples the process tree then), {"event": "end"} after
the last batch (before the system's teardown), then {"event": "result"}. Everything else it prints is the
system's own chatter.

The pipeline everywhere: decode, RandomResizedCrop(224, scale (0.08, 1),
ratio (3/4, 4/3)), horizontal flip with p 0.5; for f32 also ToTensor +
Normalize(ImageNet mean, std).
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SIZE = 224


def emit(obj):
    sys.stdout.write("PEERS " + json.dumps(obj) + "\n")
    sys.stdout.flush()


class Probe:
    """What reached the loop. Each batch costs it the same (a strided
    subsample for the channel means), whatever the system."""

    def __init__(self, dtype, epochs):
        self.dtype = dtype
        self.epochs = epochs
        self.keys = [[] for _ in range(epochs)]
        self.labels = [[] for _ in range(epochs)]
        self.shapes = {}
        self.dtypes = set()
        self.chan = [0.0, 0.0, 0.0]
        self.chan_n = 0
        self.first_cpu = None
        self.first_n = 0
        self.marks = {}
        self.images = 0

    def batch(self, epoch, images, keys, labels):
        import numpy as np
        if self.first_cpu is None:
            self.first_cpu = time.process_time()
            self.first_n = len(keys)
        if epoch not in self.marks:
            # The first batch of each epoch: the harness samples the process
            # tree here, and measures over a whole epoch between two marks.
            self.marks[epoch] = time.process_time()
            emit({"event": "mark", "epoch": epoch, "images_before": self.images, "t": time.time()})
        a = images.numpy() if hasattr(images, "numpy") and not isinstance(images, np.ndarray) else np.asarray(images)
        self.shapes[str(list(a.shape))] = self.shapes.get(str(list(a.shape)), 0) + 1
        self.dtypes.add(str(a.dtype))
        if a.ndim == 4 and len(a):
            sub = a[:, ::16, ::16, :] if a.shape[-1] == 3 else a[:, :, ::16, ::16].transpose(0, 2, 3, 1)
            m = sub.reshape(-1, 3).astype(np.float64).mean(axis=0)
            for c in range(3):
                self.chan[c] += float(m[c]) * len(a)
            self.chan_n += len(a)
        self.keys[epoch].extend(int(k) for k in keys)
        self.labels[epoch].extend(int(x) for x in labels)
        self.images += len(a)

    def end(self):
        """After the last batch, before the system's teardown (stopping
        servers is not what a training step pays)."""
        if not hasattr(self, "cpu"):
            self.cpu_end = time.process_time()
            self.cpu = self.cpu_end - (self.first_cpu or 0.0)
            emit({"event": "end", "t": time.time()})

    def finish(self, **extra):
        self.end()
        cpu = self.cpu
        emit(dict({"event": "result", "images": self.images, "keys": self.keys, "labels": self.labels,
                   "shapes": self.shapes, "dtypes": sorted(self.dtypes),
                   "channel_means": [c / self.chan_n for c in self.chan] if self.chan_n else None,
                   "trainer_cpu_s": cpu, "first_batch_images": self.first_n,
                   "trainer_cpu_at_marks": {str(e): c for e, c in self.marks.items()},
                   "trainer_cpu_at_end": self.cpu_end}, **extra))


def load_manifest(data):
    with open(os.path.join(data, "manifest.json")) as f:
        return json.load(f)


def rrc_params(w, h, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params, for the systems that
    crop by hand (SPDL's FFmpeg filter)."""
    area = w * h
    lr = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        ta = area * rng.uniform(*scale)
        ar = math.exp(rng.uniform(*lr))
        cw = int(round(math.sqrt(ta * ar)))
        ch = int(round(math.sqrt(ta / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    r = w / h
    if r < ratio[0]:
        cw, ch = w, int(round(w / ratio[0]))
    elif r > ratio[1]:
        ch, cw = h, int(round(h * ratio[1]))
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def epoch_order(n, epoch, seed=1):
    idx = list(range(n))
    random.Random(seed * 1000 + epoch).shuffle(idx)
    return idx


# --- torch DataLoader + torchvision -------------------------------------------------------

def torch_transform(dtype, tensor_input):
    import torch
    from torchvision.transforms import v2
    ops = [v2.RandomResizedCrop(SIZE, scale=(0.08, 1.0), antialias=True), v2.RandomHorizontalFlip()]
    if dtype == "f32":
        ops += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    else:
        ops += [v2.ToDtype(torch.uint8)]
    if not tensor_input:
        ops.insert(0, v2.PILToTensor())
    return v2.Compose(ops)


class FilesDataset:
    """The extracted JPEGs (the same bytes as the shards), as ImageFolder
    reads them: map-style, one file per sample."""

    def __init__(self, data, dtype, decoder):
        self.m = load_manifest(data)
        self.dir = os.path.join(data, "files")
        self.dtype, self.decoder = dtype, decoder
        self.t = None

    def __len__(self):
        return len(self.m["keys"])

    def __getitem__(self, i):
        import torch
        if self.t is None:
            torch.set_num_threads(1)
            self.t = torch_transform(self.dtype, self.decoder == "decode_jpeg")
        key = self.m["keys"][i]
        path = os.path.join(self.dir, key + ".jpg")
        if self.decoder == "pil":
            from PIL import Image
            with Image.open(path) as im:
                x = self.t(im.convert("RGB"))
        else:
            from torchvision.io import decode_jpeg, read_file, ImageReadMode
            x = self.t(decode_jpeg(read_file(path), mode=ImageReadMode.RGB))
        if self.dtype == "uint8":
            x = x.permute(1, 2, 0).contiguous()  # HWC, as the uint8 systems deliver
        return x, int(key), self.m["labels"][i]


def run_dataloader(a, probe, decoder):
    import torch
    from torch.utils.data import DataLoader
    ds = FilesDataset(a.data, a.dtype, decoder)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.setting,
                    persistent_workers=a.setting > 0, prefetch_factor=2 if a.setting else None)
    for e in range(a.epochs):
        for x, k, y in dl:
            probe.batch(e, x, k.tolist(), y.tolist())
    probe.end()
    return {"setting_name": "num_workers"}


# --- torchdata.nodes (threads) ---------------------------------------------------------------

def run_torchdata(a, probe):
    import torch
    import torchdata.nodes as tn
    torch.set_num_threads(1)
    ds = FilesDataset(a.data, a.dtype, "pil")
    ds.t = torch_transform(a.dtype, False)
    n = len(ds)
    for e in range(a.epochs):
        src = tn.IterableWrapper(epoch_order(n, e))
        node = tn.ParallelMapper(src, map_fn=ds.__getitem__, num_workers=a.setting, method="thread",
                                 in_order=False)
        node = tn.Batcher(node, batch_size=a.batch, drop_last=False)

        def collate(items):
            return torch.stack([i[0] for i in items]), [i[1] for i in items], [i[2] for i in items]
        node = tn.Prefetcher(tn.Mapper(node, collate), prefetch_factor=2)
        for x, k, y in tn.Loader(node):
            probe.batch(e, x, k, y)
    probe.end()
    return {"setting_name": "threads"}


# --- tf.data ---------------------------------------------------------------------------------

def tf_dataset(a, files_ds=None):
    import tensorflow as tf
    m = load_manifest(a.data)
    paths = [os.path.join(a.data, "files", k + ".jpg") for k in m["keys"]]
    keys = [int(k) for k in m["keys"]]
    ds = tf.data.Dataset.from_tensor_slices((paths, keys, m["labels"]))
    ds = ds.shuffle(len(paths), reshuffle_each_iteration=True)
    mean = tf.constant(MEAN) * 255.0
    std = tf.constant(STD) * 255.0

    def load(path, key, label):
        data = tf.io.read_file(path)
        shape = tf.image.extract_jpeg_shape(data)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, tf.zeros([0, 0, 4], tf.float32), min_object_covered=0.0,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        img = tf.image.decode_and_crop_jpeg(data, window, channels=3)
        img = tf.image.resize(img, [SIZE, SIZE], method="bilinear", antialias=True)
        img = tf.image.random_flip_left_right(img)
        if a.dtype == "f32":
            img = tf.transpose((img - mean) / std, [2, 0, 1])
        else:
            img = tf.cast(tf.clip_by_value(tf.round(img), 0, 255), tf.uint8)
        return img, key, label

    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return ds.batch(a.batch).prefetch(tf.data.AUTOTUNE)


def run_tf_local(a, probe):
    for e in range(a.epochs):
        for x, k, y in tf_dataset(a).as_numpy_iterator():
            probe.batch(e, x, k, y)
    probe.end()
    return {"setting_name": "AUTOTUNE"}


TF_SERVER = r"""
import sys, tensorflow as tf
kind, arg = sys.argv[1], sys.argv[2]
if kind == "dispatcher":
    s = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=int(arg), protocol="grpc"))
else:
    s = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=arg, worker_address="127.0.0.1:%port%"))
print("ready", flush=True)
s.join()
"""


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_tf_service(a, probe):
    import tensorflow as tf
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", TF_SERVER, "dispatcher", str(port)], stdout=subprocess.PIPE, text=True)]
    for _ in range(a.setting):
        procs.append(subprocess.Popen([sys.executable, "-c", TF_SERVER, "worker", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True))
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a tf.data service server did not start")
        svc = f"grpc://127.0.0.1:{port}"
        for e in range(a.epochs):
            ds = tf_dataset(a).apply(tf.data.experimental.service.distribute(
                processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC, service=svc))
            for x, k, y in ds.as_numpy_iterator():
                probe.batch(e, x, k, y)
        probe.end()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
    return {"setting_name": "workers"}


# --- Ray Data --------------------------------------------------------------------------------

def run_ray(a, probe):
    import numpy as np
    import ray
    from ray.data import DataContext, ExecutionResources
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=2 << 30)
    DataContext.get_current().execution_options.resource_limits = ExecutionResources(cpu=2)
    DataContext.get_current().enable_progress_bars = False
    m = load_manifest(a.data)
    shards = [os.path.join(a.data, "shards", s) for s in m["shards"]]
    dtype = a.dtype

    class Aug:
        def __init__(self):
            import torch
            torch.set_num_threads(1)
            self.t = torch_transform(dtype, False)

        def __call__(self, batch):
            import io
            from PIL import Image
            out = []
            for b in batch["jpg"]:
                with Image.open(io.BytesIO(b)) as im:
                    x = self.t(im.convert("RGB"))
                out.append((x.permute(1, 2, 0) if dtype == "uint8" else x).numpy())
            keys = np.array([int(k) for k in batch["__key__"]])
            labels = np.array([int(bytes(c).decode()) if isinstance(c, (bytes, bytearray)) else int(c) for c in batch["cls"]])
            return {"image": np.stack(out), "key": keys, "label": labels}

    # The actors share one of the two logical CPUs and the read tasks take
    # the other: actors of num_cpus=1 each would leave the reads none, and
    # the run waits forever.
    ds = ray.data.read_webdataset(shards, decoder=None).map_batches(
        Aug, batch_format="numpy", batch_size=64, compute=ray.data.ActorPoolStrategy(size=a.setting),
        num_cpus=1.0 / a.setting)
    for e in range(a.epochs):
        for b in ds.iter_torch_batches(batch_size=a.batch):
            probe.batch(e, b["image"], b["key"].tolist(), b["label"].tolist())
    probe.end()
    ray.shutdown()
    return {"setting_name": "map_batches actors"}


# --- NVIDIA DALI, CPU only -----------------------------------------------------------------------

def run_dali(a, probe):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    m = load_manifest(a.data)
    shards = [os.path.join(a.data, "shards", s) for s in m["shards"]]

    @pipeline_def(batch_size=a.batch, num_threads=a.setting, device_id=None, seed=1)
    def pipe():
        jpg, cls, idx = fn.readers.webdataset(paths=shards, ext=["jpg", "cls", "idx"], random_shuffle=True,
                                              initial_fill=len(m["keys"]), name="reader",
                                              missing_component_behavior="error")
        img = fn.decoders.image_random_crop(jpg, device="cpu", output_type=types.RGB,
                                            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
        img = fn.resize(img, resize_x=SIZE, resize_y=SIZE, antialias=True)
        flip = fn.random.coin_flip(probability=0.5)
        if a.dtype == "f32":
            img = fn.crop_mirror_normalize(img, mirror=flip, dtype=types.FLOAT, output_layout="CHW",
                                           mean=[x * 255 for x in MEAN], std=[x * 255 for x in STD])
        else:
            img = fn.crop_mirror_normalize(img, mirror=flip, dtype=types.UINT8, output_layout="HWC")
        # Pad the text members to one width per batch: the iterator
        # wants a uniform shape.
        return img, fn.pad(cls, fill_value=0), fn.pad(idx, fill_value=0)

    p = pipe()
    p.build()
    it = DALIGenericIterator([p], ["image", "cls", "idx"], reader_name="reader",
                             last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=False)
    for e in range(a.epochs):
        for out in it:
            d = out[0]

            def text(t):
                return [int(bytes(row[row > 0].tolist()).decode()) for row in t.numpy()]
            probe.batch(e, d["image"], text(d["idx"]), text(d["cls"]))
        it.reset()
    probe.end()
    return {"setting_name": "num_threads", "decoder": "decoders.image_random_crop (fused decode+crop)"}


# --- SPDL --------------------------------------------------------------------------------------

def run_spdl(a, probe):
    import numpy as np
    import spdl.io
    from spdl.pipeline import PipelineBuilder
    m = load_manifest(a.data)
    shards = [os.path.join(a.data, "shards", s) for s in m["shards"]]
    mean = np.array(MEAN, np.float32).reshape(3, 1, 1) * 255
    std = np.array(STD, np.float32).reshape(3, 1, 1) * 255
    rng = random.Random(1)

    def samples(epoch):
        # Shards in a new order each epoch, samples in tar order (as
        # WebDataset readers go); the shuffle is the shard order.
        order = list(shards)
        random.Random(epoch).shuffle(order)
        for path in order:
            with open(path, "rb") as f:
                cur = {}
                for name, data in spdl.io.iter_tarfile(f.read()):
                    key, ext = name.split(".", 1)
                    if cur and cur["key"] != key:
                        yield cur
                        cur = {}
                    cur["key"] = key
                    cur[ext] = bytes(data)
                if cur:
                    yield cur

    def decode(s):
        packets = spdl.io.demux_image(s["jpg"])
        w, h = packets.width, packets.height
        x, y, cw, ch = rrc_params(w, h, rng)
        flt = f"crop={cw}:{ch}:{x}:{y},scale={SIZE}:{SIZE}:flags=bilinear"
        if rng.random() < 0.5:
            flt += ",hflip"
        flt += ",format=pix_fmts=rgb24"
        frames = spdl.io.decode_packets(packets, filter_desc=flt)
        img = spdl.io.to_numpy(spdl.io.convert_frames(frames))
        img = img.reshape(SIZE, SIZE, 3)
        if a.dtype == "f32":
            img = (img.transpose(2, 0, 1).astype(np.float32) - mean) / std
        return img, int(s["key"]), int(s["cls"])

    def collate(items):
        return np.stack([i[0] for i in items]), [i[1] for i in items], [i[2] for i in items]

    for e in range(a.epochs):
        p = (PipelineBuilder().add_source(samples(e)).pipe(decode, concurrency=a.setting)
             .aggregate(a.batch).pipe(collate).add_sink(3).build(num_threads=a.setting))
        with p.auto_stop():
            for x, k, y in p:
                probe.batch(e, x, k, y)
    probe.end()
    return {"setting_name": "decode concurrency = threads", "decoder": "FFmpeg (libavcodec) crop,scale,hflip filter"}


# --- Sluice ----------------------------------------------------------------------------------------

def run_sluice(a, probe):
    """The services as a deployment runs them, each its own process: NATS
    JetStream and S3 on loopback (bench/peers/stack, the embedded servers),
    `sluice job submit`, `sluice controller --actuator local` (which starts
    the `fn serve` replicas), `sluice agent`; this process is the trainer,
    reading the agent's Unix socket with the Python client."""
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    import sluice
    binary = a.sluice_bin
    work = a.work
    os.makedirs(work, exist_ok=True)
    logs = []

    def start(name, args, env):
        log = open(os.path.join(work, name + ".log"), "w")
        logs.append(log)
        # stdin a pipe held open: the stack serves until it closes.
        return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env)

    env = dict(os.environ, AWS_ACCESS_KEY_ID="peers", AWS_SECRET_ACCESS_KEY="peers-secret", AWS_REGION="us-east-1",
               AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true")
    procs = []
    try:
        # The dataset is in S3 already (peers.py uploaded it before any
        # timed run), as the peers' files are on disk.
        stack = start("stack", [a.stack_bin, "--shards", os.path.join(a.data, "shards"),
                                "--s3-dir", os.path.join(a.data, "s3"), "--data-dir", os.path.join(work, "js")], env)
        procs.append(stack)
        info = json.loads(stack.stdout.readline())
        env.update(SLUICE_NATS_URL=info["nats_url"], SLUICE_S3_ENDPOINT=info["s3_endpoint"],
                   SLUICE_TEAM_KEY_DIR=os.path.join(work, "keys"))
        pipeline = "imagenet-train" if a.dtype == "uint8" else os.path.join(ROOT, "bench", "imagenet-train-f32.yaml")
        spec = os.path.join(work, "job.json")
        with open(spec, "w") as f:
            json.dump({"id": "peers", "dataset": info["dataset"], "batch_size": a.batch, "epochs": a.epochs,
                       "seed": 1, "min_replicas": a.setting, "max_replicas": a.setting}, f)
        r = subprocess.run([binary, "job", "submit", spec, "--pipeline", pipeline], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode:
            raise RuntimeError("sluice job submit: " + r.stderr.strip().replace("\n", " | "))
        ctl = start("controller", [binary, "controller", "--actuator", "local", "--listen", "127.0.0.1:0",
                                   "--max-replicas", str(a.setting), "--replica-concurrency", str(a.concurrency)], env)
        procs.append(ctl)
        # The trainer reads the agent's Unix socket, as one on its node does:
        # each batch a memfd it maps (--listen-unix), not a copy through TCP.
        agent_addr = f"127.0.0.1:{free_port()}"
        sock = os.path.join(work, "agent.sock")
        agent = start("agent", [binary, "agent", "--job", "peers", "--listen", agent_addr, "--listen-unix", sock,
                                "--world-size", "1"], env)
        procs.append(agent)
        with sluice.Loader("unix:" + sock, prefetch=2, timeout=300, connect_timeout=60) as ld:
            for e, batches in enumerate(ld.epochs()):
                for b in batches:
                    probe.batch(e, b["image"], b["__key__"], b["label"])
            probe.end()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()
    return {"setting_name": "replicas x concurrency"}


SYSTEMS = {
    "torch-pil": lambda a, p: run_dataloader(a, p, "pil"),
    "torch-decode_jpeg": lambda a, p: run_dataloader(a, p, "decode_jpeg"),
    "torchdata-nodes": run_torchdata,
    "tf-local": run_tf_local,
    "tf-service": run_tf_service,
    "ray-data": run_ray,
    "dali-cpu": run_dali,
    "spdl": run_spdl,
    "sluice-go": run_sluice,
    "sluice-turbo": run_sluice,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("system", choices=sorted(SYSTEMS))
    ap.add_argument("--data", required=True)
    ap.add_argument("--setting", default="2", help="the grid's value: workers, threads, replicas; for Sluice "
                    "REPLICAS or REPLICASxCONCURRENCY (shards one replica processes at once)")
    ap.add_argument("--dtype", choices=["uint8", "f32"], default="uint8")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--sluice-bin", default="")
    ap.add_argument("--stack-bin", default="")
    ap.add_argument("--work", default="")
    a = ap.parse_args()
    a.setting, _, conc = a.setting.partition("x")
    a.setting, a.concurrency = int(a.setting), int(conc or 1)
    probe = Probe(a.dtype, a.epochs)
    extra = SYSTEMS[a.system](a, probe) or {}
    probe.finish(**extra)


if __name__ == "__main__":
    main()
