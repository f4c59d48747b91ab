// The registry of every built-in scheduler, the learned one included.
#pragma once

#include "heterps/sched/scheduler.h"

namespace heterps::sched {

SchedulerRegistry DefaultSchedulers();

}  // namespace heterps::sched
