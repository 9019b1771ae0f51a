// Umbrella header: everything a coverbs program uses.
#pragma once

#include "coverbs/async_atomic.hpp"
#include "coverbs/async_queue_pair.hpp"
#include "coverbs/async_read.hpp"
#include "coverbs/async_receive.hpp"
#include "coverbs/async_send.hpp"
#include "coverbs/async_shared_receive_queue.hpp"
#include "coverbs/async_write.hpp"
#include "coverbs/completion_service.hpp"
#include "coverbs/error.hpp"
#include "coverbs/remote_buffer.hpp"
#include "coverbs/verbs/completion_queue.hpp"
#include "coverbs/verbs/device.hpp"
#include "coverbs/verbs/memory_region.hpp"
#include "coverbs/verbs/protection_domain.hpp"
#include "coverbs/verbs/queue_pair.hpp"
#include "coverbs/verbs/shared_receive_queue.hpp"
