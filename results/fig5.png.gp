set terminal pngcairo size 1100,500
set output 'fig5.png'
set title 'Figure 5: per-rank throughput vs ranks (simulated)'
set logscale x 2
set datafile separator ','
set datafile missing 'n/a'
set key autotitle columnhead
set xlabel 'ranks'
set ylabel 'k tokens/s per rank'
set grid
set key bottom left
plot 'fig5.csv' using 1:3 with linespoints title 'megatron', '' using 1:4 with linespoints title 'deepspeed', '' using 1:5 with linespoints title 'fcp-paper', '' using 1:6 with linespoints lw 2 title 'fcp'
