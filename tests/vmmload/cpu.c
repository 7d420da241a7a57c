/* CPU-bound benchmark kernel: a small fixed-point Mandelbrot render with
 * almost no system calls (one write at the end). argv[1] scales the work. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int scale = argc > 1 ? atoi(argv[1]) : 1;
	int w = 640 * scale, h = 480, maxit = 600;
	unsigned long total = 0;
	for (int y = 0; y < h; y++) {
		for (int x = 0; x < w; x++) {
			double cr = (x - w * 0.7) / (w * 0.35), ci = (y - h * 0.5) / (h * 0.45);
			double zr = 0, zi = 0;
			int i = 0;
			while (i < maxit && zr * zr + zi * zi < 4.0) {
				double t = zr * zr - zi * zi + cr;
				zi = 2 * zr * zi + ci;
				zr = t;
				i++;
			}
			total += i;
		}
	}
	printf("iterations %lu\n", total);
	return 0;
}
