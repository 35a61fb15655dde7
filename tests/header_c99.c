/* Compiled with -std=c99 -Wall -Wextra -Werror: the public header is plain C99, and its
 * initializers fill every field. */
#include "fsdp.h"

int fsdp_header_c99_probe(void) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  fsdp_unit_options_t opts = FSDP_UNIT_OPTIONS_INIT;
  fsdp_memory_stats_t stats;
  stats.size = sizeof stats;
  return (int)cfg.size + (int)opts.size + (int)stats.size + FSDP_STATUS_COUNT;
}
