"""Continuous batching with paged KV blocks, as vLLM does it: pure (no clock, no I/O, no asyncio).

A driver (the real-time server in ``cardgen.sim.server`` or the discrete-event loop in ``cardgen.sim.virtual``)
repeats::

    step = scheduler.next_step(now_s)        # what runs, and how long the modelled GPU takes
    ... wait until step.end_s (real time) or jump there (virtual time) ...
    emitted = scheduler.finish_step(step)    # every Seq in it got one token at step.end_s

Times are plain floats in whatever time base the driver uses; the scheduler only adds step durations to them.

Policy:

- KV cache: ``perf.kv_capacity_tokens // perf.block_size`` blocks. A sequence with ``computed`` tokens in its
  KV cache holds ``ceil(computed / block_size)`` blocks.
- Admission: the waiting queue is FIFO and never skipped. The head is admitted while ``max_num_seqs`` allows,
  the step's token budget (``max_num_batched_tokens``) allows, and its blocks plus one block of headroom are
  free (the headroom is waived when nothing else runs, so a lone request always starts).
- Prefill first (vLLM 0.4, the default): a step either prefills newly admitted prompts (whole prompts; a
  prompt longer than the budget is admitted alone) or decodes one token for every running sequence.
- Chunked prefill (``chunked_prefill=True``, vLLM 0.6+/V1): every step serves running sequences first (one
  token per decoding sequence, the next chunk of a partly computed prompt), then admits waiting prompts into
  what is left of the token budget, splitting the last one into a chunk.
- Growth and preemption: a decode may need a new block; when none is free, the most recently admitted running
  sequence is preempted by recompute (its blocks freed, its KV forgotten, put back at the front of the
  waiting queue; on re-admission it prefills its prompt plus the tokens it had generated).
- A sequence finishes with ``"length"`` at ``max_tokens`` output tokens, or ``"stop"`` at ``stop_at`` (the
  modelled end-of-sequence, chosen by the driver), and frees its blocks at once.
- Prefix caching (``prefix_caching=True``, vLLM V1's default): a sequence may carry ``block_hashes``, the chain
  hashes of its prompt's full blocks (:func:`block_hashes`). Once a full prompt block is computed it is kept in
  the cache under its hash; when a sequence is admitted, the longest run of its leading blocks found there is
  not recomputed (at least one prompt token always is, as vLLM does). Cached blocks are shared by every running
  sequence that hit them; a block no running sequence holds stays cached but counts as free, and is evicted,
  least recently used first, when an allocation needs its room. ``prefix_queries`` / ``prefix_hits`` count
  prompt tokens looked up and found at each admission (vLLM's ``prefix_cache_queries`` / ``_hits``).
- Speculative decoding (``spec``, :mod:`cardgen.sim.speculation`): a decoding sequence verifies K drafts per
  step (K + 1 tokens of the step's budget and compute, KV room for K + 1 more tokens) and gains 1 + j tokens, j
  drawn (seeded by ``seed``) at the configured acceptance; the counters are vLLM's ``spec_decode_*``.
- Encoder work (``Seq.encode_flops``: a vision encoder on the request's images): timed by the performance model's
  ``encode_time_s`` and added to the step that first prefills the sequence, once (a recompute after preemption
  finds it in the encoder cache).
- LoRA (``max_loras``, :mod:`cardgen.sim.lora`): a sequence may run with an ``adapter``; at most ``max_loras``
  distinct adapters run at once, and a waiting request whose adapter would be one too many is passed over (it
  keeps its place) while the requests behind it are admitted, as vLLM's scheduler does.
- Slower decoding (``Seq.decode_factor`` f > 1: a grammar's mask computed for it before each token is sampled): a
  step that decodes such sequences takes (f - 1) times its decode work's time more (the largest f of the step:
  the whole batch waits for the sampler), prefill unchanged.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, cast

from cardgen.sim.perf import PerfModel, SeqWork
from cardgen.sim.speculation import SpecCounters, Speculation


class SeqStatus(IntEnum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2
    ABORTED = 3


@dataclass(eq=False, slots=True)
class Seq:
    """One request as the scheduler sees it. Times (``*_s``) are in the driver's time base."""

    prompt_tokens: int
    max_tokens: int
    stop_at: int | None = None  # output length at which a modelled EOS ends it; None: never
    ctx: Any = None  # the driver's own per-request state

    status: SeqStatus = SeqStatus.WAITING
    output_tokens: int = 0  # tokens generated so far
    computed: int = 0  # tokens in its KV cache
    blocks: int = 0  # KV blocks it holds
    prefilled: bool = False  # computation reached the end of its known tokens since it was last admitted
    preemptions: int = 0
    finish_reason: str | None = None  # "length" | "stop" | "abort"
    block_hashes: tuple[int, ...] = ()  # chain hashes of the prompt's full blocks (prefix caching)
    pinned: list[int] = field(default_factory=list)  # the cached blocks it holds (hashes), leading blocks first
    cached_tokens: int = 0  # prompt tokens found in the prefix cache at its last admission
    adapter: str | None = None  # the LoRA adapter it runs with
    emitted: int = 0  # tokens it gained in its last step (more than 1 with speculative decoding)
    # each decode step's time for it relative to a plain sequence (constrained decoding's mask: its kind's shape,
    # cardgen.kinds.shape.VirtualCost.decode_factor); a step waits for its slowest sequence
    decode_factor: float = 1.0
    # work before its prefill (a vision encoder on its images, cardgen.sim.vision), done in the step that first
    # prefills it (vLLM runs a request's encoder in the step that schedules its first chunk), and the seconds it took
    encode_flops: float = 0.0
    encode_s: float | None = None

    arrival_s: float = 0.0  # joined the waiting queue
    received_s: float | None = None  # reached the server, when that was before it joined the queue (host time)
    scheduled_s: float | None = None  # first admitted
    first_token_s: float | None = None
    last_token_s: float | None = None
    gap_s: float | None = None  # time between its last two tokens
    end_s: float | None = None

    @property
    def finished(self) -> bool:
        return self.status >= SeqStatus.FINISHED


@dataclass(slots=True)
class Step:
    """One engine step: ``prefill[i]`` computes ``prefill_tokens[i]`` prompt tokens, each of ``decode`` one."""

    start_s: float
    duration_s: float
    prefill: list[Seq] = field(default_factory=list)
    prefill_tokens: list[int] = field(default_factory=list)
    decode: list[Seq] = field(default_factory=list)
    preempted: list[Seq] = field(default_factory=list)  # preempted while this step was planned

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def kind(self) -> str:
        if self.prefill and self.decode:
            return "mixed"
        return "prefill" if self.prefill else "decode"


@dataclass(slots=True)
class DecodeRun:
    """Decode steps applied at once (:meth:`Scheduler.decode_run`): each ended at ``ends[i]`` with ``free[i]`` KV
    blocks left free, and gave one token to each of ``seqs`` (whose tokens before them came at ``last_token_s``);
    ``in_flight``: the step after them, planned, where it ends past the run's horizon; ``finished``: the sequences
    the last of them finished (their blocks freed, in the batch's order), after which the run stops."""

    seqs: list[Seq]
    last_token_s: float
    # each sequence's last token before the run, where they differ (the run's first step then has a gap of its own
    # for each: a sequence that just had its first token, and those that waited for its prefill); None: all at
    # ``last_token_s``
    lasts: list[float] | None = None
    ends: list[float] = field(default_factory=list)
    free: list[int] = field(default_factory=list)
    in_flight: Step | None = None
    finished: list[Seq] = field(default_factory=list)


def block_hashes(token_ids: Sequence[object], block_size: int) -> tuple[int, ...]:
    """The chain hashes of the full blocks of ``token_ids``: block ``i``'s hash covers every token up to its end,
    so two prompts share a hash only where they share the whole prefix (as vLLM hashes blocks)."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        out.append(parent)
    return tuple(out)


class Scheduler:
    """Continuous batching over ``perf``'s KV cache (see the module docstring for the policy)."""

    def __init__(self, perf: PerfModel, *, chunked_prefill: bool = False, prefix_caching: bool = True,
                 spec: Speculation | None = None, max_loras: int | None = None, seed: int = 0) -> None:
        if perf.block_size < 1 or perf.kv_capacity_tokens < perf.block_size:
            raise ValueError("the KV cache must hold at least one block")
        self.perf = perf
        self._summed = getattr(perf, "summed_step_s", None)  # a step's time from its sums, where the model has it
        self.spec = spec
        self.lookahead = spec.tokens if spec is not None else 0  # draft tokens verified per decoding sequence
        self.spec_counters = SpecCounters()
        self._spec_rng = random.Random(f"spec:{seed}")
        self.max_loras = max_loras
        self.slowed = False  # a sequence with a decode factor was ever added (else no step looks for one)
        self.chunked_prefill = chunked_prefill
        self.block_size = int(perf.block_size)
        self.total_blocks = int(perf.kv_capacity_tokens) // self.block_size
        self.free_blocks = self.total_blocks
        self.max_num_seqs = int(perf.max_num_seqs)
        self.max_num_batched_tokens = int(perf.max_num_batched_tokens)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []  # in admission order
        self._in_flight: Step | None = None
        # counters, for /metrics
        self.num_steps = 0
        self.decode_run_steps = 0  # of those, applied in runs of decode steps (decode_run)
        self.num_preemptions = 0
        self.prompt_tokens_total = 0  # counted once per request, at its first token
        self.generation_tokens_total = 0
        self.finished_total: dict[str, int] = {"length": 0, "stop": 0, "abort": 0}
        # prefix cache: hash -> how many running sequences hold the block (0: cached, free, evictable), oldest first
        self.prefix_caching = prefix_caching
        self.cache: OrderedDict[int, int] = OrderedDict()
        self.evictable = 0  # cached blocks no sequence holds (counted in free_blocks)
        self.prefix_queries = 0  # prompt tokens looked up in the prefix cache
        self.prefix_hits = 0  # ... and found
        self.cache_evictions = 0

    # --- state -----------------------------------------------------------------------------------------
    @property
    def used_blocks(self) -> int:
        return self.total_blocks - self.free_blocks

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks in use (vLLM's ``kv_cache_usage_perc``: 0..1)."""
        return self.used_blocks / self.total_blocks

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether a request can ever run: its whole sequence fits in the KV cache."""
        return self.blocks_for(prompt_tokens + max_tokens) <= self.total_blocks

    # --- requests --------------------------------------------------------------------------------------
    def add(self, seq: Seq, now_s: float = 0.0) -> Seq:
        """Queue ``seq`` (at the back of the waiting queue). Raises ValueError when it can never run."""
        if seq.prompt_tokens < 1 or seq.max_tokens < 1:
            raise ValueError("a request needs at least one prompt token and max_tokens >= 1")
        if not self.fits(seq.prompt_tokens, seq.max_tokens):
            raise ValueError(
                f"{seq.prompt_tokens} prompt + {seq.max_tokens} output tokens exceed the KV cache "
                f"({self.total_blocks * self.block_size} tokens)"
            )
        seq.status = SeqStatus.WAITING
        seq.arrival_s = now_s
        if seq.decode_factor != 1.0:
            self.slowed = True
        self.waiting.append(seq)
        return seq

    def abort(self, seq: Seq, now_s: float | None = None) -> None:
        """Drop ``seq`` (a client went away): its blocks are freed at once. No-op once it has finished."""
        if seq.status == SeqStatus.WAITING:
            self.waiting.remove(seq)
        elif seq.status == SeqStatus.RUNNING:
            self.running.remove(seq)
            self._release(seq)
        else:
            return
        seq.status = SeqStatus.ABORTED
        seq.finish_reason = "abort"
        seq.end_s = now_s
        self.finished_total["abort"] += 1

    # --- steps -----------------------------------------------------------------------------------------
    def next_step(self, now_s: float = 0.0) -> Step | None:
        """Plan the next step starting at ``now_s``; None when there is nothing to do."""
        step = self._plan(now_s)
        if step is None:
            return None
        step.duration_s = self._price(step)
        self._in_flight = step
        self.num_steps += 1
        return step

    def _plan(self, now_s: float) -> Step | None:
        """What the next step starting at ``now_s`` computes (admissions, KV growth and preemptions applied), not
        yet timed; None when there is nothing to do."""
        if self._in_flight is not None:
            raise RuntimeError("finish_step() the step in flight before planning the next one")
        step = Step(start_s=now_s, duration_s=0.0)
        if self.chunked_prefill:
            budget = self._schedule_running(step, self.max_num_batched_tokens)
            if not step.preempted:  # as vLLM: no admission in a step that had to preempt
                self._admit(step, budget, now_s)
        else:
            self._admit(step, self.max_num_batched_tokens, now_s)
            if not step.prefill:
                self._schedule_running(step, self.max_num_batched_tokens)
        if not step.prefill and not step.decode:
            return None
        return step

    def _price(self, step: Step) -> float:
        """Seconds the modelled GPU takes for ``step``: from its sums where the performance model takes them
        (``summed_step_s``, the same time to the last bit for no object per sequence), else from its work."""
        summed = self._summed
        if summed is not None and not self.slowed and self.spec is None:
            tokens = pairs = cached = 0
            for s, n in zip(step.prefill, step.prefill_tokens, strict=True):
                c = s.computed - n
                tokens += n
                pairs += n * c + n * (n + 1) // 2
                cached += c
            decode = step.decode
            if decode:  # SeqWork(1, computed - 1) each: one pair per token of its context and its own
                held = sum([s.computed for s in decode])
                tokens += len(decode)
                pairs += held
                cached += held - len(decode)
            duration = summed(tokens, len(step.prefill) + len(decode), pairs, cached)
            if duration is not None:
                return self._encode_prefill(step, duration)
        prefill_work = [
            SeqWork(n, s.computed - n, s.adapter) for s, n in zip(step.prefill, step.prefill_tokens, strict=True)
        ]
        verify = 1 + self.lookahead
        decode_work = [SeqWork(verify, s.computed - 1, s.adapter) for s in step.decode]
        duration = float(self.perf.step_time_s(prefill_work, decode_work))
        slowest = max((s.decode_factor for s in step.decode), default=1.0) if self.slowed else 1.0
        if slowest != 1.0:
            duration += (slowest - 1.0) * float(self.perf.step_time_s([], decode_work))
        duration = self._encode_prefill(step, duration)
        if self.spec is not None and self.spec.method != "ngram" and decode_work:
            draft = getattr(self.perf, "draft_time_s", None)
            duration += float(draft(decode_work, self.spec.tokens)) if draft is not None else 0.0
        return duration

    def _encode_prefill(self, step: Step, duration: float) -> float:
        """``duration`` with the encoder work of the sequences ``step`` starts prefilling (their images) added, each
        timed once."""
        for s in step.prefill:
            if s.encode_flops and s.encode_s is None:
                s.encode_s = self._encode_s(s.encode_flops)
                duration += s.encode_s
        return duration

    def decode_run(self, now_s: float, horizon_s: float) -> DecodeRun | None:
        """The steps from ``now_s`` on that end before ``horizon_s``, applied at once, while the batch only decodes
        and nothing else can change: what :meth:`next_step` and :meth:`finish_step` would do step by step, to the
        last bit, for a small part of their cost (a long run spends most of its steps so).

        Such a step decodes one token for each running sequence and nothing more: nothing waits that could be
        admitted, every running sequence has its prompt computed and has emitted a token (at the same time, but
        for the run's first step: :attr:`DecodeRun.lasts`), none has drafts, an adapter or a slower decode, none
        has prompt blocks still to cache, and its new KV blocks are free (no preemption). The step in which a
        sequence reaches its last token is the run's last: those it finishes end there, their blocks freed
        (:attr:`DecodeRun.finished`), as :meth:`finish_step` ends them. Its time comes from the performance model's
        ``uniform_decode_s(seqs, context)`` (a model without it has no such steps). None where not even one step
        is such a step; otherwise the steps applied (perhaps none) and, where the next such step ends at or after
        ``horizon_s``, that step planned and timed as :meth:`next_step` leaves it (in flight)."""
        uniform = getattr(self.perf, "uniform_decode_s", None)
        running = self.running
        if (uniform is None or self._in_flight is not None or not running or self.spec is not None
                or (self.waiting and len(running) < self.max_num_seqs) or len(running) > self.max_num_batched_tokens):
            return None
        bs = self.block_size
        last = running[0].last_token_s
        together = True  # every sequence's last token came at ``last``
        room = None  # the fewest tokens a sequence may still gain
        residues = [0] * bs  # sequences by their KV tokens modulo the block size: when each needs a new block
        context = 0
        caching = self.prefix_caching
        for s in running:
            if s.last_token_s != last:
                together = False
            if (not s.prefilled or s.last_token_s is None or s.decode_factor != 1.0 or s.adapter is not None
                    or s.blocks + len(s.pinned) != -(-s.computed // bs)
                    or (caching and s.block_hashes
                        and len(s.pinned) < min(s.prompt_tokens // bs, len(s.block_hashes)))):
                return None
            gain = s.max_tokens - s.output_tokens if s.stop_at is None \
                else min(s.max_tokens, s.stop_at) - s.output_tokens
            room = gain if room is None or gain < room else room
            residues[s.computed % bs] += 1
            context += s.computed
        if last is None or room is None or room < 1:
            return None
        seqs = len(running)
        free = self.free_blocks
        run = DecodeRun(seqs=running, last_token_s=last,
                        lasts=None if together else [cast(float, s.last_token_s) for s in running])
        t = now_s
        while len(run.ends) < room:  # the step that finishes a sequence is the run's last
            k = len(run.ends)
            need = residues[-k % bs]  # those whose next token starts a block
            if need > free:
                break  # the general way preempts
            duration = uniform(seqs, context + seqs * k)
            if duration is None:
                return None if k == 0 else self._apply(run, free)
            end = t + duration
            if not end < horizon_s:
                self._apply(run, free)
                step = self._plan(t)
                assert step is not None and not step.prefill and len(step.decode) == seqs and not step.preempted
                step.duration_s = duration
                self._in_flight = step
                self.num_steps += 1
                run.in_flight = step
                return run
            free -= need
            t = end
            run.ends.append(end)
            run.free.append(free)
        return self._apply(run, free, finishing=len(run.ends) == room)

    def _apply(self, run: DecodeRun, free: int, *, finishing: bool = False) -> DecodeRun:
        """The decode steps of ``run`` done: every sequence ``len(run.ends)`` tokens further, the KV blocks they took
        taken; with ``finishing`` (the last step gave some sequence its last token), those it finished ended."""
        k = len(run.ends)
        if not k:
            return run
        bs = self.block_size
        end = run.ends[-1]
        gap = end - run.ends[-2] if k > 1 else None  # one step: each sequence's gap is from its own last token
        for s in run.seqs:
            c = s.computed
            s.blocks += -(-(c + k) // bs) - -(-c // bs)
            s.computed = c + k
            s.output_tokens += k
            s.gap_s = gap if gap is not None else end - cast(float, s.last_token_s)
            s.last_token_s = end
            s.emitted = 1
        self.free_blocks = free
        if self.evictable > self.free_blocks:
            self._evict()
        self.num_steps += k
        self.decode_run_steps += k
        self.generation_tokens_total += k * len(run.seqs)
        if finishing:
            run.finished = [s for s in run.seqs if self._ended(s, end)]
            self.running = [s for s in self.running if s.status == SeqStatus.RUNNING]
        return run

    def _encode_s(self, flops: float) -> float:
        """Seconds the modelled GPU takes for ``flops`` of encoder work (the performance model's
        ``encode_time_s``)."""
        encode = getattr(self.perf, "encode_time_s", None)
        if encode is None:
            raise ValueError(f"the performance model ({type(self.perf).__name__}) does not model an encoder's work")
        return float(encode(flops))

    def finish_step(self, step: Step) -> list[Seq]:
        """Apply ``step``: every returned Seq got one token at ``step.end_s``; those that finished have
        ``finish_reason`` set and their blocks freed. Sequences aborted meanwhile are skipped."""
        if step is not self._in_flight:
            raise RuntimeError("finish_step() takes the step returned by the last next_step()")
        self._in_flight = None
        end = step.end_s
        emitted: list[Seq] = []
        running = SeqStatus.RUNNING
        for s in step.prefill:
            if s.status == running and s.computed == s.prompt_tokens + s.output_tokens:
                s.prefilled = True
                s.emitted = 1
                emitted.append(s)
        spec = self.spec
        for s in step.decode:
            if s.status == running:
                s.emitted = 1 if spec is None else self._verified(s, spec)
                emitted.append(s)
        finished = 0
        tokens = 0
        for s in emitted:
            gained = s.emitted
            tokens += gained
            s.output_tokens += gained
            last = s.last_token_s
            if last is None:
                s.first_token_s = end
                self.prompt_tokens_total += s.prompt_tokens
            else:
                s.gap_s = end - last
            s.last_token_s = end
            if self._ended(s, end):
                finished += 1
        self.generation_tokens_total += tokens
        if finished:
            self.running = [s for s in self.running if s.status == running]
        return emitted

    def _ended(self, s: Seq, end: float) -> bool:
        """Whether ``s``'s latest token, at ``end``, was its last; if so it finished there (its reason counted, its
        blocks freed)."""
        out = s.output_tokens
        if out < s.max_tokens and (s.stop_at is None or out < s.stop_at):
            return False
        s.finish_reason = "length" if out >= s.max_tokens else "stop"
        s.status = SeqStatus.FINISHED
        s.end_s = end
        self._release(s)
        self.finished_total[s.finish_reason] += 1
        return True

    def _verified(self, s: Seq, spec: Speculation) -> int:
        """Tokens a decoding sequence gains from one verify step: the bonus token and the drafts accepted, no more
        than its output still allows (counted as vLLM counts them: every draft, every accepted one)."""
        accepted = spec.draw(self._spec_rng)
        self.spec_counters.observe(spec.tokens, accepted)
        room = s.max_tokens - s.output_tokens
        if s.stop_at is not None:
            room = min(room, s.stop_at - s.output_tokens)
        gained = max(1, min(1 + accepted, room))
        s.computed += gained - 1  # the step reserved one token; the accepted drafts are now in its KV cache too
        return gained

    # --- internals -------------------------------------------------------------------------------------
    def _schedule_running(self, step: Step, budget: int) -> int:
        """Give every running sequence its next token (or prompt chunk), preempting from the back when blocks
        run out. Computes the KV growth in advance (``computed`` is what it will be after the step)."""
        bs = self.block_size
        running = self.running
        decode = step.decode
        ahead = self.lookahead
        caching = self.prefix_caching
        i = 0
        while i < len(running):
            s = running[i]
            if budget <= 0 or (s.prefilled and budget <= ahead):
                break
            if s.prefilled and not ahead and s.computed % bs:  # decoding into room its last block still has
                s.computed += 1  # (the common case, and what the general path below does for it)
                if caching and s.block_hashes:
                    self._cache_computed(s)
                if self.evictable > self.free_blocks:
                    self._evict()
                budget -= 1
                decode.append(s)
                i += 1
                continue
            n = 1 if s.prefilled else min(s.prompt_tokens + s.output_tokens - s.computed, budget)
            extra = ahead if s.prefilled else 0  # room for the drafts it verifies
            need = max(0, (s.computed + n + extra + bs - 1) // bs - s.blocks - len(s.pinned))
            if need > self.free_blocks:
                victim = None
                while need > self.free_blocks and victim is not s:
                    victim = running[-1]
                    self._preempt(victim, step)
                if victim is s:
                    break
            self.free_blocks -= need
            s.blocks += need
            s.computed += n
            if caching and s.block_hashes:  # (the two calls' own first tests, inlined: this loop is the hot path)
                self._cache_computed(s)
            if self.evictable > self.free_blocks:
                self._evict()
            budget -= n + extra
            if s.prefilled:
                decode.append(s)
            else:
                step.prefill.append(s)
                step.prefill_tokens.append(n)
            i += 1
        return budget

    def _admit(self, step: Step, budget: int, now_s: float) -> None:  # one admission loop
        waiting = self.waiting
        running = self.running
        chunked = self.chunked_prefill
        loras = {s.adapter for s in running if s.adapter is not None} if self.max_loras is not None else None
        passed = 0  # waiting requests passed over: their adapter would be one too many
        while len(waiting) > passed and len(running) < self.max_num_seqs and budget > 0:
            s = waiting[passed]
            if (loras is not None and s.adapter is not None and s.adapter not in loras
                    and self.max_loras is not None and len(loras) >= self.max_loras):
                passed += 1
                continue
            hits = self._lookup(s) if s.computed == 0 else []
            cached = len(hits) * self.block_size
            n = s.prompt_tokens + s.output_tokens - s.computed - cached
            if n > budget:
                if chunked:
                    n = budget
                elif step.prefill:
                    break
            need = self.blocks_for(s.computed + cached + n) - s.blocks - len(s.pinned) - len(hits)
            revived = sum(1 for h in hits if self.cache[h] == 0)  # cached blocks that leave the free pool
            headroom = 1 if (running or step.prefill) else 0
            if need + revived + headroom > self.free_blocks:
                break
            if s.computed == 0 and self.prefix_caching:
                self.prefix_queries += s.prompt_tokens
                self.prefix_hits += cached
                s.cached_tokens = cached
                self._pin(s, hits)
            if passed:
                del waiting[passed]
            else:
                waiting.popleft()
            if loras is not None and s.adapter is not None:
                loras.add(s.adapter)
            running.append(s)
            s.status = SeqStatus.RUNNING
            s.prefilled = False
            if s.scheduled_s is None:
                s.scheduled_s = now_s
            self.free_blocks -= need
            s.blocks += need
            s.computed += n
            self._cache_computed(s)
            self._evict()
            budget -= n
            step.prefill.append(s)
            step.prefill_tokens.append(n)

    # --- prefix cache ----------------------------------------------------------------------------------------
    def _lookup(self, s: Seq) -> list[int]:
        """The leading blocks of ``s``'s prompt found in the cache (never all of the prompt: one token at least
        is computed)."""
        if not self.prefix_caching or not s.block_hashes:
            return []
        most = (s.prompt_tokens - 1) // self.block_size
        hits = []
        for h in s.block_hashes[:most]:
            if h not in self.cache:
                break
            hits.append(h)
        return hits

    def _pin(self, s: Seq, hits: list[int]) -> None:
        for h in hits:
            if self.cache[h] == 0:
                self.evictable -= 1
                self.free_blocks -= 1
            self.cache[h] += 1
            self.cache.move_to_end(h)
        s.pinned = list(hits)
        s.computed = len(hits) * self.block_size

    def _cache_computed(self, s: Seq) -> None:
        """Full prompt blocks ``s`` has computed (or is computing in this step) become cached blocks it holds."""
        if not self.prefix_caching or not s.block_hashes:
            return
        full = min(s.computed, s.prompt_tokens) // self.block_size
        while len(s.pinned) < min(full, len(s.block_hashes)) and s.blocks > 0:
            h = s.block_hashes[len(s.pinned)]
            if h in self.cache:  # computed twice at once (another sequence cached it first): keep its own copy
                break
            self.cache[h] = 1
            s.blocks -= 1
            s.pinned.append(h)

    def _release(self, s: Seq) -> None:
        """``s`` gives back its blocks: its own are freed, the cached ones it held stay cached (free, evictable
        once no sequence holds them)."""
        self.free_blocks += s.blocks
        s.blocks = 0
        for h in reversed(s.pinned):  # the tail of a prompt is evicted before its head, as in vLLM
            self.cache[h] -= 1
            if self.cache[h] == 0:
                self.evictable += 1
                self.free_blocks += 1
                self.cache.move_to_end(h)
        s.pinned = []
        self._evict()

    def _evict(self) -> None:
        """Cached blocks no sequence holds live in the free pool: when allocations leave fewer free blocks than
        there are such blocks, the least recently used are evicted."""
        if self.evictable <= self.free_blocks:
            return
        for h in list(self.cache):
            if self.evictable <= self.free_blocks:
                break
            if self.cache[h] == 0:
                del self.cache[h]
                self.evictable -= 1
                self.cache_evictions += 1

    def _preempt(self, victim: Seq, step: Step) -> None:
        self.running.pop()
        self._release(victim)
        victim.computed = 0
        victim.prefilled = False
        victim.status = SeqStatus.WAITING
        victim.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(victim)
        step.preempted.append(victim)
