/* Compiled with -std=c99 -Wall -Wextra -Werror: the public header is plain C99. */
#include "fsdp.h"

int fsdp_header_c99_probe(void) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  fsdp_memory_stats_t stats = {sizeof(fsdp_memory_stats_t), 0, 0, 0, 0, 0, 0, 0};
  return (int)cfg.size + (int)stats.size + FSDP_STATUS_COUNT;
}
