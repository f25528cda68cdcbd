// The thread team of team.h. One call at a time owns the helpers; its work items are
// claimed through `ticket` (the call's number in the high 32 bits, the next item in the
// low 32), so a helper that read a finished call's ticket can never claim an item of the
// next call: its compare-and-swap fails.
#include "team.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax() { _mm_pause(); }
#else
static inline void cpu_relax() {}
#endif

namespace team {
namespace {

constexpr int MAX_HELPERS = 15;
constexpr uint64_t CLOSED = 0xffffffffu;  // item index of a call being set up: nothing to claim

using Clock = std::chrono::steady_clock;

// How long a helper stays awake after its last item (WHISPER_KV_SPIN_US, default 100 us):
// longer than the gaps between a step's kernel calls, far shorter than a decode's pauses.
std::chrono::nanoseconds spin_time() {
    static const long us = [] {
        const char* value = std::getenv("WHISPER_KV_SPIN_US");
        return value ? std::atol(value) : 100L;
    }();
    return std::chrono::microseconds(us);
}

struct Team {
    std::mutex publishing;              // held by the call that owns the helpers
    std::mutex growing;                 // held while helpers are started
    int helpers = 0;
    uint32_t calls = 0;                 // guarded by `publishing`
    std::atomic<uint32_t> generation{0};  // the latest call's number; helpers wait on it
    std::atomic<uint64_t> ticket{0};
    std::atomic<long> items{0};
    std::atomic<Task> task{nullptr};
    std::atomic<void*> context{nullptr};
    std::atomic<int> participants{0};   // helpers numbered below this take part in the call
    std::atomic<long> finished{0};      // items of the call done, by anyone
    std::atomic<int> sleepers{0};
    std::atomic<int64_t> alone_until{0};  // steady_clock ns: calls run on their caller alone
};

// When another process wants the cores, a helper gets descheduled: a call then waits for
// an item that is not running, and a spinning helper takes CPU time the caller could use.
// Either sign (a call waiting DESCHEDULED for a helper's item, or a spinning helper finding
// DESCHEDULED between two looks at the clock; an item takes well under it) makes the calls
// of the next BACK_OFF run on their callers alone, with the helpers asleep.
constexpr std::chrono::milliseconds BACK_OFF{50};
constexpr std::chrono::microseconds DESCHEDULED{1000};

int64_t ns(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
int64_t now_ns() { return ns(Clock::now()); }

std::atomic<long> back_offs{0};  // since the process started, for the step profile

void back_off(Team& team) {
    back_offs.fetch_add(1, std::memory_order_relaxed);
    team.alone_until.store(now_ns() + std::chrono::nanoseconds(BACK_OFF).count(), std::memory_order_relaxed);
}

// Claims and runs items of call `call` until none is left.
void work(Team& team, uint32_t call) {
    uint64_t ticket = team.ticket.load(std::memory_order_acquire);
    for (;;) {
        const long item = (long)(ticket & 0xffffffffu);
        if ((uint32_t)(ticket >> 32) != call || item >= team.items.load(std::memory_order_relaxed))
            return;
        if (!team.ticket.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel,
                                               std::memory_order_acquire))
            continue;
        // Claimed: the call cannot end before `finished` counts this item, so its task and
        // context stay what they were when the call was published.
        team.task.load(std::memory_order_relaxed)(team.context.load(std::memory_order_relaxed), item);
        team.finished.fetch_add(1, std::memory_order_release);
        ticket = team.ticket.load(std::memory_order_acquire);
    }
}

void helper_main(Team* team, int number) {
    uint32_t seen = team->generation.load(std::memory_order_acquire);
    for (;;) {
        Clock::time_point idle_since = Clock::now(), last_look = idle_since;
        uint32_t call;
        for (int spins = 0;; spins++) {
            call = team->generation.load(std::memory_order_acquire);
            if (call != seen) break;
            cpu_relax();
            if ((spins & 63) != 63) continue;
            const Clock::time_point now = Clock::now();
            if (now - last_look > DESCHEDULED) back_off(*team);  // the core went to someone else
            last_look = now;
            const bool alone = ns(now) < team->alone_until.load(std::memory_order_relaxed);
            if (alone || now - idle_since > spin_time()) {
                // Sleep until the next call. Announce first, then look again: the caller
                // publishes, then looks for sleepers (both sequentially consistent), so one
                // of the two always sees the other and no wake-up is lost.
                team->sleepers.fetch_add(1);
                if (team->generation.load() == seen) team->generation.wait(seen);
                team->sleepers.fetch_sub(1);
                idle_since = last_look = Clock::now();
            }
        }
        seen = call;
        if (number < team->participants.load(std::memory_order_relaxed)) work(*team, call);
    }
}

Team* the_team(int helpers_wanted) {
    // The helpers are threads of the process that started them; a forked child starts
    // its own (the parent's team is left as it is: its threads do not exist there).
    static Team* team = nullptr;
    static pid_t owner = 0;
    static std::mutex making;
    std::lock_guard<std::mutex> lock(making);
    if (team == nullptr || owner != getpid()) {
        team = new Team;  // never freed: helpers block on it until the process exits
        owner = getpid();
    }
    std::lock_guard<std::mutex> growing(team->growing);
    while (team->helpers < helpers_wanted && team->helpers < MAX_HELPERS) {
        std::thread(helper_main, team, team->helpers).detach();
        team->helpers++;
    }
    return team;
}

void run_alone(long items, Task task, void* context) {
    for (long item = 0; item < items; item++) task(context, item);
}

}  // namespace

void run(long items, Task task, void* context, int threads) {
    if (threads <= 1 || items <= 1) return run_alone(items, task, context);
    Team& team = *the_team(threads - 1);
    if (now_ns() < team.alone_until.load(std::memory_order_relaxed)) return run_alone(items, task, context);
    std::unique_lock<std::mutex> owning(team.publishing, std::try_to_lock);
    if (!owning.owns_lock()) return run_alone(items, task, context);  // another decode has it

    const uint32_t call = ++team.calls;
    team.ticket.store(((uint64_t)call << 32) | CLOSED);  // a stale claim fails from here on
    team.items.store(items, std::memory_order_relaxed);
    team.task.store(task, std::memory_order_relaxed);
    team.context.store(context, std::memory_order_relaxed);
    team.participants.store(threads - 1, std::memory_order_relaxed);
    team.finished.store(0, std::memory_order_relaxed);
    team.ticket.store((uint64_t)call << 32, std::memory_order_release);
    team.generation.store(call);
    if (team.sleepers.load() > 0) team.generation.notify_all();

    work(team, call);
    // Wait only for the items a helper has started (short: one item each).
    if (team.finished.load(std::memory_order_acquire) < items) {
        const Clock::time_point waiting_since = Clock::now();
        bool backed_off = false;
        for (long spins = 0; team.finished.load(std::memory_order_acquire) < items; spins++) {
            cpu_relax();
            if ((spins & 255) != 255) continue;
            if (!backed_off && Clock::now() - waiting_since > DESCHEDULED) {
                back_off(team);  // the helper was descheduled mid-item
                backed_off = true;
            }
            if (backed_off) std::this_thread::yield();
        }
    }
}

}  // namespace team

// The calling thread's OpenMP thread count (libgomp's, which torch shares: this library
// is linked with -fopenmp, the same soname), for kernels.step_threads.
#include <omp.h>

extern "C" {
void set_openmp_threads(int threads) { omp_set_num_threads(threads); }
int openmp_threads() { return omp_get_max_threads(); }
long team_back_offs() { return team::back_offs.load(); }
}
