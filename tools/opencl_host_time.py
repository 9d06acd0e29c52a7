"""Where a batch-1 opencl run's host time goes on this device: the whole Session.run, the
backend's enqueues alone, raw pyopencl enqueues on a queue with and without profiling, ctypes
calls with no events, the feed write and output read, and the kernels' busy time against their
span. Found that NVIDIA's driver enqueues slowly with sub-buffer arguments (README "With a real
GPU"). Usage: python tools/opencl_host_time.py [zoo model ...] (default: mobilenet_v2 resnet18)."""
import ctypes, statistics, sys, time
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "tests"))
import pyopencl as cl
import edgesdk
from zoo import export_onnx


def opencl_lib():
    for line in open("/proc/self/maps"):
        if "libOpenCL" in line:
            return line.split()[-1]


def timed(fn, before=None, n=60):
    out = []
    for _ in range(n):
        if before: before()
        t0 = time.perf_counter(); fn(); out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e3, min(out) * 1e3


lib = ctypes.CDLL(opencl_lib())
enq = lib.clEnqueueNDRangeKernel
enq.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
enq.restype = ctypes.c_int
lib.clFlush.argtypes = [ctypes.c_void_p]
print("lib", opencl_lib())
for name in sys.argv[1:] or ["mobilenet_v2", "resnet18"]:
    s = edgesdk.Session(str(export_onnx(name, input_shape=(1, 3, 224, 224))), backend="opencl")
    impl = s._impl
    q, q2 = impl.device.profiling_queue, impl.device.queue  # with and without profiling
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    feeds = {s.input_names[0]: x}
    for _ in range(10): s.run(feeds)
    launches = [l for st in impl._steps for l in st.launches]
    print(f"== {name}: {len(launches)} launches, {len(impl._runners)} runners, memory {'zero_copy' if impl.zero_copy else 'copy'}")
    r = lambda label, v: print(f"  {label:58s} median {v[0]:7.3f} ms  min {v[1]:7.3f} ms")
    r("Session.run", timed(lambda: s.run(feeds)))
    r("backend.run", timed(lambda: impl.run(feeds)))
    r("_execute (runners + finish)", timed(lambda: impl._execute(impl._io)))
    def runners():
        for f in impl._runners: f()
    r("runners, enqueue only (finish before, untimed)", timed(runners, q2.finish)); q2.finish()
    def raw(queue):
        for l in launches: cl.enqueue_nd_range_kernel(queue, l.kernel, l.global_size, l.local_size)
    r("pyopencl raw, profiling queue, enqueue only", timed(lambda: raw(q), q.finish)); q.finish()
    r("pyopencl raw, profiling queue, + finish", timed(lambda: (raw(q), q.finish())))
    r("pyopencl raw, plain queue, enqueue only", timed(lambda: raw(q2), q2.finish)); q2.finish()
    r("pyopencl raw, plain queue, + finish", timed(lambda: (raw(q2), q2.finish())))
    packed = []
    for l in launches:
        dims = len(l.global_size)
        g = (ctypes.c_size_t * dims)(*l.global_size)
        loc = (ctypes.c_size_t * dims)(*l.local_size) if l.local_size else None
        packed.append((ctypes.c_void_p(l.kernel.int_ptr), dims, g, loc))
    def viactypes(queue):
        qp = ctypes.c_void_p(queue.int_ptr)
        for k, d, g, loc in packed:
            rc = enq(qp, k, d, None, g, loc, 0, None, None)
            if rc: raise RuntimeError(rc)
    r("ctypes, no events, profiling queue, enqueue only", timed(lambda: viactypes(q), q.finish)); q.finish()
    r("ctypes, no events, profiling queue, + finish", timed(lambda: (viactypes(q), q.finish())))
    r("ctypes, no events, plain queue, enqueue only", timed(lambda: viactypes(q2), q2.finish)); q2.finish()
    r("ctypes, no events, plain queue, + finish", timed(lambda: (viactypes(q2), q2.finish())))
    r("write feeds + finish", timed(lambda: (impl._write_feeds(impl._io, feeds), q2.finish())))
    r("read outputs", timed(lambda: impl._read_outputs(impl._io)))
    q.finish()
    pq = impl.device.profiling_queue
    evs = [cl.enqueue_nd_range_kernel(pq, l.kernel, l.global_size, l.local_size) for l in launches]
    pq.finish()
    busy = sum(e.profile.end - e.profile.start for e in evs) / 1e6
    span = (evs[-1].profile.end - evs[0].profile.start) / 1e6
    print(f"  device: kernels busy {busy:.3f} ms, first start to last end {span:.3f} ms")
    s.close()
