# prezero compare plots: run 'gnuplot plots.gp' in this folder.
if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 900,560 } else { set terminal png size 900,560 }
set termoption noenhanced
set output 'throughput.png'
set title 'glm4_5_air TP 1, 16 layers: output tokens/s per GPU'
set xlabel 'concurrency'; set ylabel 'tokens/s per GPU'; set logscale x 2; set key left top; set grid
plot 'throughput.dat' using 1:2 with linespoints lw 2 title 'prezero ON', '' using 1:3 with linespoints lw 2 title 'prezero OFF'
unset logscale x
set output 'components.png'
set title 'kernel time per layer, ON - OFF (µs; negative = saved; n/f = 0)'
set xlabel 'concurrency'; set ylabel 'µs per layer'; set style data histogram
set style histogram clustered gap 1; set style fill solid 0.8 border -1; set key outside right
plot 'components.dat' using 2:xtic(1) title 'qkv_a', '' using 3 title 'q_b', '' using 4 title 'gate', '' using 5 title 'o_proj', '' using 6 title 'sh_gu', '' using 7 title 'GEMM subtotal', '' using 8 title 'donor fill cost'
