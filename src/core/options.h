/* Run-time options: the public struct (include/prezero_options.h) and its one reader. */
#ifndef PZ_CORE_OPTIONS_H
#define PZ_CORE_OPTIONS_H
#include "prezero_options.h"
#endif
