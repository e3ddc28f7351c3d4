"""Where each tensor of the plan is: the device copy, copies in host tiers, and the device
bytes the plan's steps account for.

Glossary:
  device copy   the tensor on the device tier (a CPU tensor on the CPU backend, a CUDA
                tensor on the CUDA backend); at most one per tensor
  tier copy     a copy in a non-device tier (host memory, pinned on CUDA); valid until the
                device copy is updated in place
  tracked bytes the workload's bytes of every tensor with a device copy: what the plan
                says the device holds. Only the steps move it: a prefetch allocates when it
                is issued, a compute step allocates its outputs, a detach frees.
  event         a plan event: completed by a prefetch or store, waited on by later steps
"""

from tierflow_export.refs import untyped_storage as storage_of

from .errors import PlanError


def layout_copy(torch, t, device=None, pin=False):
    """A copy of t with the same sizes and strides (so that views rebuilt on the copy and
    kernels run on it see the layout the original had)."""
    out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype,
                              device=device if device is not None else t.device,
                              pin_memory=pin)
    out.copy_(t)
    return out


def storage_key(t):
    return (t.device.type, t.device.index, storage_of(t).data_ptr())


class CpuBackend:
    """Device and host tiers in RAM; copies are synchronous, so every event has completed
    by the time the step that issues it returns."""
    name = "cpu"

    def __init__(self, torch):
        self.torch = torch
        self.device = torch.device("cpu")

    def to_device(self, host, waits):
        return layout_copy(self.torch, host), None

    def to_host(self, dev, waits):
        return layout_copy(self.torch, dev), None

    def initial(self, value, on_device):
        return layout_copy(self.torch, value)

    def begin(self, start):
        pass

    def profile_mark(self, stream_name):
        return None

    def compute_waits(self, events):
        pass

    def after_compute(self, mark=False):
        return None

    def memory_begin(self):
        pass

    def memory_now(self):
        """(allocated, peak allocated since memory_begin): the CPU backend has no allocator
        statistics."""
        return None, None

    def uses(self, t):
        pass

    def synchronize(self):
        pass


class CudaBackend:
    """One GPU. Compute runs on the current stream; prefetches on a side stream (host to
    device), stores on another (device to host). A cache step is issued once its anchor
    (the compute step before it) has finished: its stream waits on an event recorded after
    that compute step, then on the plan events it waits on. Plan events are CUDA events
    recorded after the copy. A tensor allocated on one stream and used on another is
    recorded on the other (Tensor.record_stream) so that freeing it never lets the caching
    allocator reuse memory a queued kernel or copy still reads."""
    name = "cuda"

    def __init__(self, torch, index=0):
        if not torch.cuda.is_available():
            from .errors import InputError
            raise InputError("--device cuda: this torch has no usable CUDA device "
                             f"(torch {torch.__version__}, built with CUDA "
                             f"{torch.version.cuda})")
        self.torch = torch
        self.device = torch.device("cuda", index)
        torch.cuda.set_device(self.device)
        self.compute = torch.cuda.current_stream(self.device)
        self.h2d = torch.cuda.Stream(self.device)
        self.d2h = torch.cuda.Stream(self.device)
        self.anchor = None  # event after the latest compute step (or the run's start)
        self.stale = False  # compute steps were issued after the anchor was recorded
        self.last_copy = {}  # copy stream -> its latest event, joined at the end
        # With a profile: every event is a timing event, and profile_mark records one on
        # a stream where the work of a step begins (after its waits).
        self.timing = False
        self.copy_begin = None  # with a profile: the mark before the latest copy

    def begin(self, start):
        """The run starts at event `start` (recorded on the compute stream): the first
        cache steps, issued before any compute step, wait for it."""
        self.anchor = start

    def _issue(self, stream, waits):
        if self.stale:
            self._record_anchor()
        if self.anchor is not None:
            stream.wait_event(self.anchor)
        for e in waits:
            if e is not None:
                stream.wait_event(e)

    def _event(self):
        return self.torch.cuda.Event(enable_timing=self.timing)

    def profile_mark(self, stream_name):
        """A timing event recorded now on the named stream (compute, h2d, d2h)."""
        e = self.torch.cuda.Event(enable_timing=True)
        e.record(getattr(self, stream_name))
        return e

    def to_device(self, host, waits):
        torch = self.torch
        self._issue(self.h2d, waits)
        self.copy_begin = self.profile_mark("h2d") if self.timing else None
        with torch.cuda.stream(self.h2d):
            dev = torch.empty_strided(host.size(), host.stride(), dtype=host.dtype,
                                      device=self.device)
            dev.copy_(host, non_blocking=True)
        dev.record_stream(self.compute)
        done = self._event()
        done.record(self.h2d)
        self.last_copy["h2d"] = done
        return dev, done

    def to_host(self, dev, waits):
        torch = self.torch
        self._issue(self.d2h, waits)
        self.copy_begin = self.profile_mark("d2h") if self.timing else None
        host = torch.empty_strided(dev.size(), dev.stride(), dtype=dev.dtype, device="cpu",
                                   pin_memory=True)
        with torch.cuda.stream(self.d2h):
            host.copy_(dev, non_blocking=True)
        dev.record_stream(self.d2h)
        done = self._event()
        done.record(self.d2h)
        self.last_copy["d2h"] = done
        return host, done

    def initial(self, value, on_device):
        if on_device:
            return layout_copy(self.torch, value, device=self.device)
        return layout_copy(self.torch, value, device="cpu", pin=True)

    def compute_waits(self, events):
        for e in events:
            if e is not None:
                self.compute.wait_event(e)

    def _record_anchor(self):
        self.anchor = self._event()
        self.anchor.record(self.compute)
        self.stale = False

    def after_compute(self, mark=False):
        """After a compute step's kernels. Its anchor event is recorded when a copy next
        needs it (_issue): an event recorded then on the compute stream completes after
        exactly the compute steps issued before the copy, as one recorded after the latest
        of them does, and the runs of compute steps with no copy between them record none.
        With `mark` (a profiled run) it is recorded now and returned: the step's end mark."""
        if not mark:
            self.stale = True
            return None
        self._record_anchor()
        return self.anchor

    def uses(self, t):
        pass

    def memory_begin(self):
        """Starts a step's peak: the caching allocator's peak statistics reset."""
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def memory_now(self):
        """(bytes allocated now, the most allocated since memory_begin), as the caching
        allocator counts them on the host, when a step is issued."""
        cuda = self.torch.cuda
        return cuda.memory_allocated(self.device), cuda.max_memory_allocated(self.device)

    def join(self):
        """The compute stream waits for every copy issued so far."""
        for e in self.last_copy.values():
            self.compute.wait_event(e)

    def synchronize(self):
        self.torch.cuda.synchronize(self.device)


class Memory:
    """The residency of every workload tensor while a plan runs, and the tracked bytes."""

    def __init__(self, torch, backend, workload, plan):
        self.torch = torch
        self.backend = backend
        self.workload = workload
        self.plan = plan
        self.bytes = [t["bytes"] for t in workload["tensors"]]
        self.names = [t["name"] for t in workload["tensors"]]
        self.dev = {}  # tensor id -> (device copy, the key of its storage)
        self.tier = {}  # (tensor id, tier) -> tier copy
        self.valid = {}  # tensor id -> the tiers whose copy holds the current value
        self.pending = {}  # tensor id -> (event, step) of the prefetch that brought it
        self.events = {}  # plan event -> (backend event or None, issuing step)
        self.waited = set()  # plan events some executed step waited on
        self.detached_at = {}  # tensor id -> the step that last detached it
        self.storages = {}  # storage key -> tensor ids whose device copy lives in it
        self.current = 0
        self.peak = 0
        self.peak_step = None

    # -- accounting ----------------------------------------------------------------------

    def _alloc(self, tid, tensor, step, key=None):
        key = storage_key(tensor) if key is None else key
        self.dev[tid] = (tensor, key)
        self.storages.setdefault(key, set()).add(tid)
        self.current += self.bytes[tid]
        if self.current > self.peak:
            self.peak = self.current
            self.peak_step = step.index if step is not None else None

    def _free(self, tid):
        tensor, key = self.dev.pop(tid)
        self.current -= self.bytes[tid]
        owners = self.storages.get(key, set())
        owners.discard(tid)
        if not owners:
            self.storages.pop(key, None)
            # Whatever else still refers to this storage (autograd's graph of a training
            # step holds the tensors an op read and wrote) must not keep the memory: the
            # plan freed it. Nothing reads it again unless the plan is broken, and then the
            # read fails on the empty storage instead of seeing stale data.
            storage_of(tensor).resize_(0)
        self.pending.pop(tid, None)

    # -- the start ------------------------------------------------------------------------

    def place_external(self, tid, value):
        """An external tensor (weights, inputs, optimizer state) at its home tier."""
        home = self.plan.home[tid]
        if home == self.plan.device_tier:
            self._alloc(tid, self.backend.initial(value, True), None)
        else:
            self.tier[(tid, home)] = self.backend.initial(value, False)
            self.valid.setdefault(tid, set()).add(home)

    # -- the steps ------------------------------------------------------------------------

    def wait(self, step):
        """The step's waits: each event must have been issued by an earlier step."""
        events = []
        for e in step.wait:
            if e not in self.events:
                raise PlanError(step, f"waits on event {e}, which no earlier step completes",
                                self.workload)
            self.waited.add(e)
            events.append(self.events[e][0])
        return events

    def _issued(self, step, backend_event):
        if step.event is not None:
            if step.event in self.events:
                raise PlanError(step, f"event {step.event} is already completed by step "
                                f"{self.events[step.event][1].index}", self.workload)
            self.events[step.event] = (backend_event, step)

    def prefetch(self, step):
        tid, tier = step.target, step.tier
        waits = self.wait(step)
        if tid in self.dev:
            raise PlanError(step, f"'{self.names[tid]}' is already on the device",
                            self.workload)
        if tier not in self.valid.get(tid, ()):
            why = ("has no copy there" if (tid, tier) not in self.tier else
                   "has a stale copy there (updated on the device since it was stored)")
            raise PlanError(step, f"'{self.names[tid]}' {why}", self.workload)
        dev, done = self.backend.to_device(self.tier[(tid, tier)], waits)
        self._alloc(tid, dev, step)
        self.pending[tid] = (step.event, step)
        self._issued(step, done)

    def store(self, step):
        tid, tier = step.target, step.tier
        waits = self.wait(step)
        dev = self.device_copy(tid, step, reading=False)
        if tid in self.pending:  # the copy must not overtake the prefetch that brought it
            waits.append(self.events.get(self.pending[tid][0], (None,))[0])
        host, done = self.backend.to_host(dev, waits)
        self.tier[(tid, tier)] = host
        self.valid.setdefault(tid, set()).add(tier)
        self._issued(step, done)

    def detach(self, step):
        tid = step.target
        self.wait(step)
        if tid not in self.dev:
            raise PlanError(step, f"'{self.names[tid]}' is not on the device", self.workload)
        self._free(tid)
        self.detached_at[tid] = step

    def produce(self, tid, tensor, step):
        """An output of the compute step: allocated on the device."""
        if tid in self.dev:
            raise PlanError(step, f"its output '{self.names[tid]}' is already on the device",
                            self.workload)
        key = storage_key(tensor)
        if key in self.storages:
            # A result that shares memory with another tensor of the plan (autograd can
            # hand back the gradient it was given): the plan holds them apart.
            tensor, key = layout_copy(self.torch, tensor), None
        self._alloc(tid, tensor, step, key)
        self.valid.pop(tid, None)

    def updated(self, tid):
        """The device copy was modified in place: tier copies are no longer current."""
        self.valid.pop(tid, None)

    # -- reads ----------------------------------------------------------------------------

    def resident(self, tid):
        return tid in self.dev

    def readable(self, tid):
        """On the device, and any prefetch that brought it waited on."""
        pending = self.pending.get(tid)
        return tid in self.dev and (pending is None or pending[0] in self.waited)

    def device_copy(self, tid, step, reading=True, why=""):
        """The device copy of tid for `step`; a PlanError naming the step when the plan has
        not put it there, or when the step did not wait for the prefetch that did."""
        if tid not in self.dev:
            if tid in self.detached_at:
                where = f"; step {self.detached_at[tid].index} detached it"
            elif self.plan.home[tid] != self.plan.device_tier:
                where = f"; its home is {self.plan.home[tid]} and no step prefetched it"
            else:
                where = ""
            raise PlanError(step, f"'{self.names[tid]}'{why} is not on the device{where}",
                            self.workload)
        pending = self.pending.get(tid)
        if reading and pending is not None:
            event, by = pending
            if event is None or event not in self.waited:
                raise PlanError(step, f"reads '{self.names[tid]}' before waiting on the "
                                f"event of step {by.index} that prefetches it", self.workload)
            # The plan's rule lets any earlier step wait on the prefetch (a store, say, on
            # its own stream): compute waits for the copy itself before its first read.
            self.backend.compute_waits([self.events[event][0]])
            del self.pending[tid]
        return self.dev[tid][0]

    def final_value(self, tid):
        """The current value of a tensor after the run: its device copy, else a current tier
        copy, else None (the plan dropped it)."""
        if tid in self.dev:
            return self.dev[tid][0]
        for tier in sorted(self.valid.get(tid, ())):
            return self.tier[(tid, tier)]
        return None
