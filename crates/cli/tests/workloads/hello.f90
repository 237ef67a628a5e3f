! A short MPI program in Fortran with the mpi module (the registration tests).
program hello
  use mpi
  integer :: ierr, rank, size
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  print '(a,i0,a,i0)', 'hello from rank ', rank, ' of ', size
  call MPI_Finalize(ierr)
end program hello
