/* /init of the initramfs that tools/avx512_under_bochs.py boots under Bochs (an emulated CPU with
 * AVX-512): mounts /proc, prints the CPU's flags (to show the kernel sees avx512f), runs
 * `/kernel_tests --isa avx512 [ARGS]` with ARGS the words after "--" on the kernel command line
 * (from the first one starting with '-': the kernel also passes init the words it did not know),
 * prints the sentinel line "EDGESDK-BOCHS-EXIT <status>" and powers the machine off. Every line
 * goes to /dev/console (the serial port: console=ttyS0). Static, no libraries beyond libc. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static void power_off(void) {
  fflush(stdout);
  tcdrain(STDOUT_FILENO); /* the serial port's buffer: power off loses what it still holds */
  sync();
  reboot(RB_POWER_OFF);
  for (;;) pause(); /* init must not exit: the kernel would panic */
}

/* The "flags" line of /proc/cpuinfo, prefixed so the harness finds it. */
static void print_cpu_flags(void) {
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) {
    printf("EDGESDK-BOCHS-CPUINFO unreadable: %s\n", strerror(errno));
    return;
  }
  char line[8192];
  int model = 0, flags = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (!model && strncmp(line, "model name", 10) == 0) {
      printf("EDGESDK-BOCHS-MODEL%s", strchr(line, ':') + 1);
      model = 1;
    } else if (!flags && strncmp(line, "flags", 5) == 0) {
      printf("EDGESDK-BOCHS-FLAGS%s", strchr(line, ':') + 1);
      flags = 1;
    }
  }
  fclose(f);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  mkdir("/proc", 0755);
  mkdir("/dev", 0755);
  if (mount("proc", "/proc", "proc", 0, NULL) != 0) printf("EDGESDK-BOCHS-WARN mount /proc: %s\n", strerror(errno));
  if (mount("devtmpfs", "/dev", "devtmpfs", 0, NULL) != 0 && errno != EBUSY)
    printf("EDGESDK-BOCHS-WARN mount /dev: %s\n", strerror(errno));
  print_cpu_flags();

  /* /kernel_tests --isa avx512, then this init's own arguments: the kernel passes init the words
   * of its command line it does not know (nokaslr: the decompressor's), then the words after "--";
   * the driver's arguments start at the first word starting with '-'. */
  char* args[64] = {"/kernel_tests", "--isa", "avx512"};
  int n = 3, first = 1;
  while (first < argc && argv[first][0] != '-') ++first;
  for (int i = first; i < argc && n < 63; ++i) args[n++] = argv[i];
  args[n] = NULL;
  printf("EDGESDK-BOCHS-RUN");
  for (int i = 0; i < n; ++i) printf(" %s", args[i]);
  printf("\n");

  int status = -1;
  const pid_t pid = fork();
  if (pid == 0) {
    /* One emulated CPU: the pool's workers sleep at once instead of spinning 1 ms between jobs
     * (on a shared core the spinning only costs emulated instructions; the kernels are the same). */
    char* envp[] = {"PATH=/", "HOME=/", "EDGESDK_CPU_SPIN_US=0", NULL};
    execve(args[0], args, envp);
    printf("EDGESDK-BOCHS-WARN exec %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  if (pid < 0) {
    printf("EDGESDK-BOCHS-WARN fork: %s\n", strerror(errno));
  } else {
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    /* exit status, or 128 + signal number as a shell reports it (SIGILL: 132) */
    status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : 255;
  }
  printf("EDGESDK-BOCHS-EXIT %d\n", status);
  power_off();
  return 0;
}
