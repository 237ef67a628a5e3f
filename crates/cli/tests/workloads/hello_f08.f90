! A short MPI program in Fortran with the mpi_f08 module (the registration tests).
program hello
  use mpi_f08
  integer :: rank, size
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, size)
  print '(a,i0,a,i0)', 'hello from rank ', rank, ' of ', size
  call MPI_Finalize()
end program hello
