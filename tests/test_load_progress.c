/* The checkpoint loader's progress bar (README: "for loads longer than a second"): a load that
 * ends within a second prints nothing on stderr, also when stderr is a terminal (it drew the bar
 * at once there, so every program embedding the library printed on a terminal's stderr). Stderr
 * is a pseudo-terminal here; exit 77 where none can be opened. */
#define _XOPEN_SOURCE 600
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include "prezero.h"
#include "pz_test.h"

int main(void) {
  char dir[1024];
  PZ_TEST_PATH(dir, "data/golden/deepseek_v3");
  unsetenv("PREZERO_PROGRESS");
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
    fprintf(stderr, "no pseudo-terminal: skipped\n");
    return 77;
  }
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  if (slave < 0) {
    fprintf(stderr, "no pseudo-terminal: skipped\n");
    return 77;
  }
  fflush(stderr);
  int saved = dup(2);
  CHECK(saved >= 0 && dup2(slave, 2) == 2);
  const int tty = isatty(2);
  pz_engine_config c = PZ_ENGINE_CONFIG_INIT;
  c.model_dir = dir;
  c.max_batch = 1;
  c.context = 0;
  c.max_steps = 2;
  c.threads = 1;
  pz_engine *e = NULL;
  const pz_status st = pz_engine_create(&c, &e);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  CHECK(tty);
  CHECK_OK(st);
  pz_engine_destroy(e);
  fcntl(master, F_SETFL, O_NONBLOCK);
  char buf[512];
  const ssize_t n = read(master, buf, sizeof buf - 1);
  if (n > 0) {
    buf[n] = 0;
    fprintf(stderr, "stderr got: %s\n", buf);
  }
  CHECK(n <= 0); /* nothing written: EAGAIN (or EIO once the terminal is closed) */
  close(slave);
  close(master);
  TEST_DONE();
}
