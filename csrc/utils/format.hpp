// fmt, header-only: from third-party/fmt when the build found it there, else PyTorch's bundled copy.
#pragma once

#ifndef FMT_HEADER_ONLY
#define FMT_HEADER_ONLY
#endif
#include <fmt/format.h>
#include <fmt/ranges.h>
