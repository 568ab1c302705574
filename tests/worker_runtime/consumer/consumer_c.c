/* The C API from C: a handle whose environment lacks WORLD_SIZE fails to open with
 * DTRUN_ERR_CONFIG and says why. */
#include <dtrun/worker/c_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  dtrun_worker* w = NULL;
  int rc;
  unsetenv("WORLD_SIZE");
  rc = dtrun_worker_open(&w, 100);
  printf("dtrun_worker_open: status %d: %s\n", rc, dtrun_worker_error(w));
  if (rc != DTRUN_ERR_CONFIG || strstr(dtrun_worker_error(w), "WORLD_SIZE is not set") == NULL ||
      dtrun_worker_rank(w) != -1 || dtrun_worker_abort_requested(w) != 0) {
    dtrun_worker_close(w);
    return 1;
  }
  dtrun_worker_close(w);
  printf("consumer_c: ok (built with NCCL: %d)\n", DTRUN_WORKER_HAS_NCCL);
  return 0;
}
