set terminal pngcairo size 1100,500
set output 'fig6.png'
set title 'Figure 6: MLLMs, frozen vision encoder (simulated)' noenhanced
set datafile missing '?'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel 'speedup over best static baseline'
set xtics rotate by -45 noenhanced font ',8'
set yrange [0:*]
set key outside top center horizontal
set grid ytics
plot 'fig6.dat' using 2:xtic(1) title 'fcp (ours)', '' using 3 title 'fcp-paper (ours)', '' using 4 title 'paper FCP', 1 with lines lc rgb 'black' dt 2 notitle
