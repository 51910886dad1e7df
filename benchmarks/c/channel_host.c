// Minimal channel host for benchmarks/channel_floor.py. All inliner features are int64 [1].
//   host BASE               answer every decision with `inlining_default` (the last feature)
//   host BASE record FILE   the same, and write each decision to FILE as '0'/'1'
//   host BASE replay FILE   answer with the decisions in FILE, in order (for a compiler run
//                           without -inliner-interactive-include-default)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
int main(int argc, char **argv) {
  if (argc != 2 && argc != 4) return 2;
  const char *mode = argc == 4 ? argv[2] : "default";
  FILE *decisions = NULL;
  if (argc == 4) {
    decisions = fopen(argv[3], strcmp(mode, "record") == 0 ? "wb" : "rb");
    if (!decisions) return 2;
  }
  char in[4096], out[4096];
  snprintf(in, sizeof in, "%s.in", argv[1]);
  snprintf(out, sizeof out, "%s.out", argv[1]);
  FILE *w = fopen(in, "wb");
  FILE *r = fopen(out, "rb");
  if (!w || !r) return 2;
  static char line[1 << 20];
  if (!fgets(line, sizeof line, r)) return 0;
  int n = 0;
  for (char *p = line; (p = strstr(p, "\"name\"")); p++) n++;
  n -= 1;  // the advice spec also has a name
  int64_t *buf = malloc(8 * n + 1);
  while (fgets(line, sizeof line, r)) {
    if (strncmp(line, "{\"observation\"", 14) == 0) {
      if (fread(buf, 1, 8 * n + 1, r) != (size_t)(8 * n + 1)) return 3;
      int64_t adv;
      if (strcmp(mode, "replay") == 0) {
        int c = fgetc(decisions);
        if (c != '0' && c != '1') return 4;  // the compiler asked more than was recorded
        adv = c == '1';
      } else {
        adv = buf[n - 1] != 0;
        if (decisions) fputc(adv ? '1' : '0', decisions);
      }
      fwrite(&adv, 8, 1, w);
      fflush(w);
    }
  }
  if (decisions) fclose(decisions);
  return 0;
}
