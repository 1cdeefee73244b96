/* prezero CLI entry (placeholder until the commands land). */
#include "prezero.h"
#include <stdio.h>
int main(int argc, char **argv) { printf("prezero\n"); return 0; }
